{{/* Names used by the device-plugin templates. */}}
{{- define "hami.devicePlugin.name" -}}
{{- printf "%s-device-plugin" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hami.devicePlugin.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: hami-device-plugin
{{- end -}}

{{- define "hami.devicePlugin.nodeConfigName" -}}
{{- .Values.devicePlugin.nodeConfiguration.externalConfigName | default (include "hami.devicePlugin.name" .) -}}
{{- end -}}

{{- define "hami.devicePlugin.deviceConfigName" -}}
{{- .Values.devicePlugin.deviceConfigMapName | default (printf "%s-scheduler-device" .Release.Name) -}}
{{- end -}}

{{- define "hami.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* "true" when the test-only fake NVML fixture is on; fails the render when it is set without the acknowledgement. */}}
{{- define "hami.devicePlugin.fakeNvml" -}}
{{- $testing := .Values.devicePlugin.testing | default dict -}}
{{- if $testing.fakeNvml -}}
{{- if not (eq (toString $testing.acknowledgeFakeGPUs) "true") -}}
{{- fail "devicePlugin.testing.fakeNvml is set: the device plugin would advertise GPUs that do not exist. It is for test clusters only; if this is one, also set devicePlugin.testing.acknowledgeFakeGPUs=true" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}
