{{/* Names and labels shared by every template. */}}

{{- define "hami.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hami.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hami.scheduler" -}}
{{- printf "%s-scheduler" (include "hami.fullname" .) -}}
{{- end -}}

{{- define "hami.webhook" -}}
{{- printf "%s-webhook" (include "hami.fullname" .) -}}
{{- end -}}

{{- define "hami.certs" -}}
{{- printf "%s-certs" (include "hami.fullname" .) -}}
{{- end -}}

{{- define "hami.tlsSecret" -}}
{{- .Values.scheduler.tls.secretName | default (printf "%s-tls" (include "hami.scheduler" .)) -}}
{{- end -}}

{{- define "hami.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "hami.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "hami.scheduler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hami.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: hami-scheduler
{{- end -}}

{{- define "hami.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* kube-scheduler of the cluster's own version unless a tag is given ("v1.36.3-eks-1" -> "v1.36.3"). */}}
{{- define "hami.kubeSchedulerImage" -}}
{{- $image := .Values.scheduler.kubeScheduler.image -}}
{{- $tag := $image.tag | default (regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version) -}}
{{- printf "%s/%s:%s" $image.registry $image.repository $tag -}}
{{- end -}}

{{- define "hami.tlsEnabled" -}}
{{- if .Values.scheduler.admissionWebhook.enabled -}}true{{- end -}}
{{- end -}}

{{/* DNS names of the serving certificate: the Service in every spelling, plus extras. */}}
{{- define "hami.tlsDNSNames" -}}
{{- $svc := include "hami.scheduler" . -}}
{{- $names := list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) -}}
{{- if .Values.scheduler.admissionWebhook.customURL.enabled -}}
{{- $host := .Values.scheduler.admissionWebhook.customURL.host -}}
{{- if not (regexMatch "^[0-9.]+$|:" $host) -}}
{{- $names = append $names $host -}}
{{- end -}}
{{- end -}}
{{- concat $names .Values.scheduler.tls.extraDNSNames | uniq | toJson -}}
{{- end -}}

{{- define "hami.tlsIPs" -}}
{{- $ips := list "127.0.0.1" -}}
{{- if .Values.scheduler.admissionWebhook.customURL.enabled -}}
{{- $host := .Values.scheduler.admissionWebhook.customURL.host -}}
{{- if regexMatch "^[0-9.]+$|:" $host -}}
{{- $ips = append $ips $host -}}
{{- end -}}
{{- end -}}
{{- concat $ips .Values.scheduler.tls.extraIPs | uniq | toJson -}}
{{- end -}}

{{/* Every resource the extender manages: kube-scheduler calls hami for pods asking for any of them and
     leaves their node accounting to hami. */}}
{{- define "hami.managedResources" -}}
{{- $names := list -}}
{{- if .Values.devices.nvidia.enabled -}}
{{- $names = concat $names (list .Values.resourceName .Values.resourceMem .Values.resourceMemPercentage .Values.resourceCores .Values.resourcePriority) -}}
{{- end -}}
{{- if .Values.devices.hygon.enabled -}}
{{- $names = concat $names (list .Values.dcuResourceName .Values.dcuResourceMem .Values.dcuResourceCores) -}}
{{- end -}}
{{- $names | compact | uniq | toJson -}}
{{- end -}}
