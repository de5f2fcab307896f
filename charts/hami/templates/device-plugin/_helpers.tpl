{{/* Names used by the device-plugin templates. */}}
{{/* <release>-device-plugin; <fullname>-device-plugin with HAMi's nameOverride or fullnameOverride. */}}
{{- define "hami.devicePlugin.name" -}}
{{- $base := ternary (include "hami.fullname" .) .Release.Name (or (not (empty (index .Values "nameOverride"))) (not (empty (index .Values "fullnameOverride")))) -}}
{{- printf "%s-device-plugin" $base | trunc 63 | trimSuffix "-" -}}
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
{{- .Values.devicePlugin.deviceConfigMapName | default (printf "%s-device" (include "hami.scheduler" .)) -}}
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
