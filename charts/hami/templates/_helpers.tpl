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
     leaves their node accounting to hami; the webhook sees only pods asking for one of them (or naming hami's
     scheduler). One source of truth: the resource names of the device config hami reads
     (scheduler.deviceConfig.content when given, else the values it is built from), for the enabled vendors. */}}
{{- define "hami.managedResources" -}}
{{- $content := dict -}}
{{- if .Values.scheduler.deviceConfig.content -}}
{{- $content = fromYaml .Values.scheduler.deviceConfig.content -}}
{{- if hasKey $content "Error" -}}
{{- fail (printf "scheduler.deviceConfig.content is not valid YAML: %s" (get $content "Error")) -}}
{{- end -}}
{{- end -}}
{{- $names := list -}}
{{- if .Values.devices.nvidia.enabled -}}
{{- $nv := get $content "nvidia" | default dict -}}
{{- $defaults := dict "resourceCountName" .Values.resourceName "resourceMemoryName" .Values.resourceMem "resourceMemoryPercentageName" .Values.resourceMemPercentage "resourceCoreName" .Values.resourceCores "resourcePriorityName" .Values.resourcePriority -}}
{{- range $key := list "resourceCountName" "resourceMemoryName" "resourceMemoryPercentageName" "resourceCoreName" "resourcePriorityName" -}}
{{- $names = append $names (ternary (get $nv $key) (get $defaults $key) (hasKey $nv $key)) -}}
{{- end -}}
{{- end -}}
{{- if .Values.devices.hygon.enabled -}}
{{- $dcu := get $content "hygon" | default dict -}}
{{- $defaults := dict "resourceCountName" .Values.dcuResourceName "resourceMemoryName" .Values.dcuResourceMem "resourceCoreName" .Values.dcuResourceCores -}}
{{- range $key := list "resourceCountName" "resourceMemoryName" "resourceCoreName" -}}
{{- $names = append $names (ternary (get $dcu $key) (get $defaults $key) (hasKey $dcu $key)) -}}
{{- end -}}
{{- end -}}
{{- if .Values.devices.kunlun.enabled -}}
{{- $kunlun := get $content "kunlun" | default dict -}}
{{- $defaults := dict "resourceCountName" .Values.kunlunResourceName "resourceVCountName" .Values.kunlunResourceVCountName "resourceVMemoryName" .Values.kunlunResourceVMemoryName -}}
{{- range $key := list "resourceCountName" "resourceVCountName" "resourceVMemoryName" -}}
{{- $names = append $names (ternary (get $kunlun $key) (get $defaults $key) (hasKey $kunlun $key)) -}}
{{- end -}}
{{- end -}}
{{- if .Values.devices.enflame.enabled -}}
{{- $enf := get $content "enflame" | default dict -}}
{{- $defaults := dict "resourceNameGCU" "enflame.com/gcu" "resourceNameDRSGCU" .Values.enflameResourceNameDRSGCU "resourceNameGCUMemory" .Values.enflameResourceNameGCUMemory "resourceNameGCUCore" .Values.enflameResourceNameGCUCore -}}
{{- range $key := list "resourceNameGCU" "resourceNameDRSGCU" "resourceNameGCUMemory" "resourceNameGCUCore" -}}
{{- $names = append $names (ternary (get $enf $key) (get $defaults $key) (hasKey $enf $key)) -}}
{{- end -}}
{{- end -}}
{{- if .Values.devices.awsneuron.enabled -}}
{{- $aws := get $content "awsneuron" | default dict -}}
{{- $defaults := dict "resourceCountName" "aws.amazon.com/neuron" "resourceCoreName" "aws.amazon.com/neuroncore" -}}
{{- range $key := list "resourceCountName" "resourceCoreName" -}}
{{- $names = append $names (ternary (get $aws $key) (get $defaults $key) (hasKey $aws $key)) -}}
{{- end -}}
{{- end -}}
{{- if .Values.devices.amd.enabled -}}
{{- $amd := get $content "amd" | default dict -}}
{{- $defaults := dict "resourceCountName" "amd.com/gpu" "resourceMemoryName" "amd.com/gpumem" "resourceCoreName" "amd.com/gpucores" -}}
{{- range $key := list "resourceCountName" "resourceMemoryName" "resourceCoreName" -}}
{{- $names = append $names (ternary (get $amd $key) (get $defaults $key) (hasKey $amd $key)) -}}
{{- end -}}
{{- end -}}
{{- if .Values.devices.vastai.enabled -}}
{{- $va := get $content "vastai" | default dict -}}
{{- $names = append $names (ternary (get $va "resourceCountName") .Values.vastaiResourceName (hasKey $va "resourceCountName")) -}}
{{- end -}}
{{- if .Values.devices.biren.enabled -}}
{{- $br := get $content "biren" | default dict -}}
{{- $names = append $names (ternary (get $br "resourceCountName") .Values.birenResourceName (hasKey $br "resourceCountName")) -}}
{{- end -}}
{{- $names | compact | uniq | toJson -}}
{{- end -}}

{{/* The kube-scheduler sidecar's own ServiceAccount (hami's is hami.scheduler). */}}
{{- define "hami.kubeScheduler" -}}
{{- printf "%s-kube-scheduler" (include "hami.fullname" .) -}}
{{- end -}}
