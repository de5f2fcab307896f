{{/* Names used by the DRA plugin templates (docs/dra-driver.md). */}}
{{- define "hami.draPlugin.name" -}}
{{- $base := ternary (include "hami.fullname" .) .Release.Name (or (not (empty (index .Values "nameOverride"))) (not (empty (index .Values "fullnameOverride")))) -}}
{{- printf "%s-dra-plugin" $base | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hami.draPlugin.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: hami-dra-plugin
{{- end -}}

{{- define "hami.draPlugin.driver" -}}hami-core-gpu.project-hami.io{{- end -}}

{{/* "true" when the test-only fake NVML fixture is on; fails the render without the acknowledgement. */}}
{{- define "hami.draPlugin.fakeNvml" -}}
{{- $testing := .Values.draPlugin.testing | default dict -}}
{{- if $testing.fakeNvml -}}
{{- if not (eq (toString $testing.acknowledgeFakeGPUs) "true") -}}
{{- fail "draPlugin.testing.fakeNvml is set: the DRA plugin would publish GPUs that do not exist. It is for test clusters only; if this is one, also set draPlugin.testing.acknowledgeFakeGPUs=true" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}
