{{/* Names and labels shared by every template. */}}

{{/* nameOverride and fullnameOverride as in HAMi's chart. */}}
{{- define "hami.name" -}}
{{- index .Values "nameOverride" | default .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hami.fullname" -}}
{{- $name := index .Values "nameOverride" | default .Chart.Name -}}
{{- if index .Values "fullnameOverride" -}}
{{- index .Values "fullnameOverride" | trunc 50 | trimSuffix "-" -}}
{{- else if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
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
{{- include "hami.imageOf" (list . "scheduler.extender") -}}
{{- end -}}

{{/* kube-scheduler of the cluster's own version unless a tag is given ("v1.36.3-eks-1" -> "v1.36.3", a
     pre-release keeps its suffix: "v1.38.0-beta.0"), from global.imageRegistry when set (HAMi's mirror of every
     image). */}}
{{- define "hami.kubeSchedulerImage" -}}
{{- $image := .Values.scheduler.kubeScheduler.image -}}
{{- $release := "^v[0-9]+\\.[0-9]+\\.[0-9]+(-(alpha|beta|rc)\\.[0-9]+)?" -}}
{{- $tag := $image.tag | default (regexFind $release .Capabilities.KubeVersion.Version) -}}
{{- $registry := index (.Values.global | default dict) "imageRegistry" | default $image.registry -}}
{{- printf "%s/%s:%s" $registry $image.repository $tag -}}
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

{{/* device-config.yaml (HAMi's format) built from the values: every family's section, enabled or not (the
     device plugins of HAMi read it too: Ascend's reads the vNPU templates). */}}
{{- define "hami.deviceConfigFromValues" -}}
{{- $nvidia := .Values.devices.nvidia -}}
nvidia:
  resourceCountName: {{ .Values.resourceName }}
  resourceMemoryName: {{ .Values.resourceMem }}
  resourceMemoryPercentageName: {{ .Values.resourceMemPercentage }}
  resourceCoreName: {{ .Values.resourceCores }}
  resourcePriorityName: {{ .Values.resourcePriority }}
  overwriteEnv: {{ .Values.scheduler.overwriteEnv }}
  defaultMemory: {{ $nvidia.defaultMemory | int }}
  defaultCores: {{ $nvidia.defaultCores | int }}
  defaultGPUNum: {{ $nvidia.defaultGPUNum | int }}
  memoryFactor: {{ $nvidia.memoryFactor | int }}
  gpuCorePolicy: {{ $nvidia.gpuCorePolicy }}
  libCudaLogLevel: {{ $nvidia.libCudaLogLevel | int }}
  runtimeClassName: {{ $nvidia.runtimeClassName | quote }}
  {{- $dp := .Values.devicePlugin }}
  deviceSplitCount: {{ $dp.deviceSplitCount | int }}
  deviceMemoryScaling: {{ $dp.deviceMemoryScaling | float64 }}
  deviceCoreScaling: {{ $dp.deviceCoreScaling | float64 }}
  preConfiguredDeviceMemory: {{ $dp.preConfiguredDeviceMemory | default 0 | int64 }}
  enableNumaTopology: {{ $dp.enableNumaTopology | default false }}
  disableCoreLimit: {{ $dp.disablecorelimit | default false }}
hygon:
  resourceCountName: {{ .Values.dcuResourceName }}
  resourceMemoryName: {{ .Values.dcuResourceMem }}
  resourceCoreName: {{ .Values.dcuResourceCores }}
  memoryFactor: {{ .Values.devices.hygon.memoryFactor | int }}
kunlun:
  resourceCountName: {{ .Values.kunlunResourceName }}
  resourceVCountName: {{ .Values.kunlunResourceVCountName }}
  resourceVMemoryName: {{ .Values.kunlunResourceVMemoryName }}
enflame:
  resourceNameGCU: enflame.com/gcu
  resourceNameDRSGCU: {{ .Values.enflameResourceNameDRSGCU }}
  resourceNameGCUMemory: {{ .Values.enflameResourceNameGCUMemory }}
  resourceNameGCUCore: {{ .Values.enflameResourceNameGCUCore }}
awsneuron:
  resourceCountName: aws.amazon.com/neuron
  resourceCoreName: aws.amazon.com/neuroncore
amd:
  resourceCountName: amd.com/gpu
  resourceCoreName: amd.com/gpucores
  resourceMemoryName: amd.com/gpumem
vastai:
  resourceCountName: {{ .Values.vastaiResourceName }}
biren:
  resourceCountName: {{ .Values.birenResourceName }}
cambricon:
  resourceCountName: {{ .Values.mluResourceName }}
  resourceMemoryName: {{ .Values.mluResourceMem }}
  resourceCoreName: {{ .Values.mluResourceCores }}
metax:
  resourceCountName: metax-tech.com/gpu
  resourceVCountName: {{ .Values.metaxResourceName }}
  resourceVMemoryName: {{ .Values.metaxResourceMem }}
  resourceVCoreName: {{ .Values.metaxResourceCore }}
  sgpuTopologyAware: {{ .Values.metaxsGPUTopologyAware | toString | eq "true" }}
mthreads:
  resourceCountName: mthreads.com/vgpu
  resourceMemoryName: mthreads.com/sgpu-memory
  resourceCoreName: mthreads.com/sgpu-core
  {{- with index (.Values.devices.mthreads | default dict) "memoryPerCard" }}
  memoryPerCard: {{ ternary . (list .) (kindIs "slice" .) | toJson }}
  {{- end }}
iluvatars:
{{- range .Values.devices.iluvatar.chips }}
  - chipName: {{ . }}
    commonWord: {{ . }}
    resourceCountName: iluvatar.ai/{{ . }}-vgpu
    resourceMemoryName: iluvatar.ai/{{ . }}.vMem
    resourceCoreName: iluvatar.ai/{{ . }}.vCore
{{- end }}
vnpus:
  hamiVnpuCore: {{ .Values.devices.ascend.hamiVnpuCore }}
  configs:
{{- $ascend := .Values.devices.ascend }}
{{- $overwrite := .Values.scheduler.overwriteEnv | toString | eq "true" }}
{{- range $ascend.chips }}
{{- $names := dict "resourceName" (printf "huawei.com/%s" .commonWord) "resourceMemoryName" (printf "huawei.com/%s-memory" .commonWord) "resourceCoreName" (printf "huawei.com/%s-core" .commonWord) "runtimeClassName" $ascend.runtimeClassName "overwriteEnv" $overwrite }}
{{- list (merge (deepCopy .) $names) | toYaml | nindent 4 }}
{{- end }}
{{ include "hami.draConfig" . }}
{{- end -}}

{{/* The device config's dra: section (docs/dra.md), from the values. */}}
{{- define "hami.draConfig" -}}
dra:
  enabled: {{ .Values.dra.enabled }}
  drivers:
    {{- toYaml .Values.dra.drivers | nindent 4 }}
{{- end -}}

{{/* Every resource the extender manages: kube-scheduler calls hami for pods asking for any of them and
     leaves their node accounting to hami; the webhook sees only pods asking for one of them (or naming hami's
     scheduler). One source of truth: the resource names of the device config hami reads
     (scheduler.deviceConfig.content when given, a key or section it leaves out taken from the values), for the
     families enabled in devices.<family>.enabled. */}}
{{- define "hami.managedResources" -}}
{{- $content := dict -}}
{{- if .Values.scheduler.deviceConfig.content -}}
{{- $content = fromYaml .Values.scheduler.deviceConfig.content -}}
{{- if hasKey $content "Error" -}}
{{- fail (printf "scheduler.deviceConfig.content is not valid YAML: %s" (get $content "Error")) -}}
{{- end -}}
{{- end -}}
{{- $values := include "hami.deviceConfigFromValues" . | fromYaml -}}
{{- $counts := list "resourceCountName" "resourceMemoryName" "resourceCoreName" -}}
{{- $families := list
  (list "nvidia" "nvidia" (list "resourceCountName" "resourceMemoryName" "resourceMemoryPercentageName" "resourceCoreName" "resourcePriorityName"))
  (list "hygon" "hygon" $counts)
  (list "kunlun" "kunlun" (list "resourceCountName" "resourceVCountName" "resourceVMemoryName"))
  (list "enflame" "enflame" (list "resourceNameGCU" "resourceNameDRSGCU" "resourceNameGCUMemory" "resourceNameGCUCore"))
  (list "awsneuron" "awsneuron" (list "resourceCountName" "resourceCoreName"))
  (list "amd" "amd" (list "resourceCountName" "resourceMemoryName" "resourceCoreName"))
  (list "vastai" "vastai" (list "resourceCountName"))
  (list "biren" "biren" (list "resourceCountName"))
  (list "cambricon" "cambricon" $counts)
  (list "metax" "metax" (list "resourceCountName" "resourceVCountName" "resourceVMemoryName" "resourceVCoreName"))
  (list "mthreads" "mthreads" $counts)
  (list "iluvatar" "iluvatars" $counts)
  (list "ascend" "vnpus" (list "resourceName" "resourceMemoryName" "resourceCoreName")) -}}
{{- $names := list -}}
{{- range $families -}}
{{- $family := index . 0 -}}{{- $key := index . 1 -}}{{- $fields := index . 2 -}}
{{- if (get $.Values.devices $family | default dict).enabled -}}
{{- $section := get $values $key -}}
{{- $given := get $content $key -}}
{{- if kindIs "map" $section -}}
{{- if hasKey $section "configs" -}}
{{- $section = $section.configs -}}
{{- if kindIs "map" $given -}}{{- $given = get $given "configs" -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if kindIs "slice" $section -}}
{{- $items := ternary $given $section (and (hasKey $content $key) (kindIs "slice" $given)) -}}
{{- range $item := $items -}}
{{- range $field := $fields -}}
{{- $names = append $names (get $item $field | default "") -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- $given = $given | default dict -}}
{{- range $field := $fields -}}
{{- $names = append $names (ternary (get $given $field) (get $section $field) (hasKey $given $field)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $names = concat $names (include "hami.customResources" . | fromJsonArray) -}}
{{- $names | compact | uniq | toJson -}}
{{- end -}}

{{/* hami scheduler's family switches from devices.<family>.enabled: HAMi's --enable-ascend/--enable-iluvatar
     for the families off by default, --disable-devices for the others switched off. */}}
{{- define "hami.familyArgs" -}}
{{- $args := list -}}
{{- $off := list -}}
{{- range $family := list "nvidia" "hygon" "kunlun" "enflame" "awsneuron" "amd" "vastai" "biren" "cambricon" "metax" "mthreads" -}}
{{- if not (get $.Values.devices $family | default (dict "enabled" true)).enabled -}}
{{- $off = append $off $family -}}
{{- end -}}
{{- end -}}
{{- range $family := list "ascend" "iluvatar" -}}
{{- if (get $.Values.devices $family | default dict).enabled -}}
{{- $args = append $args (printf "--enable-%s" $family) -}}
{{- end -}}
{{- end -}}
{{- if $off -}}
{{- $args = append $args (printf "--disable-devices=%s" (join "," $off)) -}}
{{- end -}}
{{- $args | toJson -}}
{{- end -}}

{{/* The kube-scheduler sidecar's own ServiceAccount (hami's is hami.scheduler). */}}
{{- define "hami.kubeScheduler" -}}
{{- printf "%s-kube-scheduler" (include "hami.fullname" .) -}}
{{- end -}}

{{/* The words of the default GPU policy, alone or a comma chain ("topology-aware, binpack" -> both), as JSON. */}}
{{- define "hami.gpuPolicyTokens" -}}
{{- $tokens := list -}}
{{- range splitList "," (toString .Values.scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy) -}}
{{- $tokens = append $tokens (trim .) -}}
{{- end -}}
{{- $tokens | compact | toJson -}}
{{- end -}}

{{/* The Kubernetes minor versions hami is tested on: the releases make test-matrix ran are v1.36.3 and v1.37.2
     (hami.testedKubeReleases); 1.38 is not released and not claimed. */}}
{{- define "hami.testedKubeVersions" -}}
>=1.36.0-0 <1.38.0-0
{{- end -}}

{{- define "hami.testedKubeReleases" -}}
v1.36.3 and v1.37.2
{{- end -}}

{{/* Empty on a tested cluster version; else a sentence saying so (kubeVersionCheck: warn prints it in the notes,
     refuse fails the install with it). */}}
{{- define "hami.kubeVersionWarning" -}}
{{- $version := .Capabilities.KubeVersion.Version -}}
{{- $check := .Values.kubeVersionCheck | default "warn" -}}
{{- if not (has $check (list "warn" "refuse" "off")) -}}
{{- fail (printf "kubeVersionCheck: %v is not one of warn, refuse, off" $check) -}}
{{- end -}}
{{- if and (ne $check "off") (not (semverCompare (include "hami.testedKubeVersions" .) $version)) -}}
hami was tested on Kubernetes {{ include "hami.testedKubeReleases" . }} (no other release); this cluster is {{ $version }}
{{- end -}}
{{- end -}}
