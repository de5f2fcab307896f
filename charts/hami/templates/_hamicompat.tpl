{{/* A values file written for HAMi's chart (v2.10) means the same here (docs/coming-from-hami.md).

     Every template starts with `include "hami.values" .`, which, before anything reads the values:
       * refuses HAMi's keys hami cannot honour, naming the key and what to use instead;
       * reads every boolean of the chart leniently (true/false, "true"/"false", yes/no, on/off, 1/0) and stores
         it back as a boolean, so `if .Values.x` means the same for `false` and `"false"`;
       * copies HAMi's spelling of a setting onto hami's key (hami's keys win where only they are changed;
         both changed and different: fail), e.g. scheduler.extenderHTTPTimeout: 30 (seconds) onto
         scheduler.kubeScheduler.extenderHTTPTimeout: 30s.
     It is idempotent: a second run finds the values already in hami's form. A boolean key added to the chart
     belongs in hami.booleanKeys. */}}

{{- define "hami.values" -}}
{{- include "hami.refuseHAMiKeys" . -}}
{{- $values := .Values -}}
{{- range $key := include "hami.booleanKeys" . | fromJsonArray -}}
{{- $found := include "hami.lookup" (list $values $key) | fromJson -}}
{{- if and $found.found (not (kindIs "invalid" $found.v)) -}}
{{- include "hami.setPath" (list $values $key (eq (include "hami.bool" (list $key $found.v)) "true")) -}}
{{- end -}}
{{- end -}}
{{- range $alias := include "hami.aliases" . | fromJsonArray -}}
{{- $value := include "hami.setting" (merge (dict "root" $) $alias) | fromJson -}}
{{- if not (kindIs "invalid" $value.v) -}}
{{- include "hami.setPath" (list $values $alias.key $value.v) -}}
{{- end -}}
{{- end -}}
{{- $w := $values.scheduler.admissionWebhook -}}
{{- if kindIs "invalid" $w.whitelistNamespaces -}}{{- $_ := set $w "whitelistNamespaces" list -}}{{- end -}}
{{- $dp := $values.devicePlugin -}}
{{- $_ := set $dp "extraEnvs" (include "hami.envList" (list "devicePlugin.extraEnvs" $dp.extraEnvs) | fromJsonArray) -}}
{{- $monitor := index $dp "monitor" -}}
{{- if kindIs "map" $monitor -}}
{{- $_ := set $monitor "extraEnvs" (include "hami.envList" (list "devicePlugin.monitor.extraEnvs" (index $monitor "extraEnvs")) | fromJsonArray) -}}
{{- end -}}
{{- $ks := $values.scheduler.kubeScheduler -}}
{{- $args := list -}}
{{- range $ks.extraNewArgs -}}
{{- if hasPrefix "--config=" (toString .) -}}
{{- if ne (toString .) "--config=/config/config.yaml" -}}
{{- fail (printf "scheduler.kubeScheduler.extraNewArgs: %s: hami's kube-scheduler reads the configuration the chart writes (--config=/config/config.yaml); change the scheduler through the chart's values instead" .) -}}
{{- end -}}
{{- else -}}
{{- $args = append $args . -}}
{{- end -}}
{{- end -}}
{{- $_ := set $ks "extraNewArgs" $args -}}
{{- end -}}

{{/* Every boolean key of the chart, hami's and HAMi's. */}}
{{- define "hami.booleanKeys" -}}
{{- $keys := list "metaxsGPUTopologyAware" "dra.enabled" "draMode.enabled" "draMode.prioritize" "grafanaDashboard.enabled"
  "scheduler.leaderElect" "scheduler.forceOverwriteDefaultScheduler" "scheduler.overwriteEnv"
  "scheduler.metricsSecure" "scheduler.livenessProbe" "scheduler.allocationPolicy.enabled" "scheduler.kubeScheduler.enabled"
  "scheduler.kubeScheduler.extenderTLSInsecure" "scheduler.admissionWebhook.enabled"
  "scheduler.admissionWebhook.customURL.enabled" "scheduler.admissionWebhook.manageNamespaceSelector"
  "scheduler.certManager.enabled" "scheduler.patch.enabled" "scheduler.networkPolicy.enabled"
  "devicePlugin.enabled" "devicePlugin.nodeRestriction" "devicePlugin.enableNumaTopology"
  "devicePlugin.disablecorelimit" "devicePlugin.hostPID" "devicePlugin.hostNetwork" "devicePlugin.createRuntimeClass"
  "devicePlugin.passDeviceSpecsEnabled" "devicePlugin.gdrcopyEnabled" "devicePlugin.gdsEnabled"
  "devicePlugin.mofedEnabled" "devicePlugin.vgpuMonitor.enabled" "devicePlugin.gpuOperatorToolkitReady.enabled"
  "devicePlugin.numaRefit.enabled" "devicePlugin.numaRefit.tlsInsecure" "devicePlugin.hostPIDBroker.enabled"
  "devices.ascend.hamiVnpuCore" "global.managedNodeSelectorEnable" "platform.openshift"
  "openshift.securityContextConstraints.create" "selinux.enabled" "podSecurityPolicy.enabled"
  "mockDevicePlugin.enabled" "legacyMetrics" "prometheus.enabled" "serviceMonitor.enabled" -}}
{{- range $family, $_ := .Values.devices -}}
{{- $keys = append $keys (printf "devices.%s.enabled" $family) -}}
{{- end -}}
{{- $keys | toJson -}}
{{- end -}}

{{/* HAMi's spelling -> hami's key. default: hami's key's default in values.yaml (a template cannot read the chart's
     own values.yaml; tests/chart/test_hami_values.py renders HAMi's defaults, which give every one of these keys,
     so a default changed in values.yaml alone fails there). aliasDefault: HAMi's default, which names HAMi's own
     image or nothing and so counts as not given; without it, HAMi's key counts as given whenever it is present. */}}
{{- define "hami.aliases" -}}
{{- $s := .Values.scheduler -}}
{{- list
  (dict "key" "dcuResourceName" "default" "hygon.com/dcunum" "alias" "hcuResourceName")
  (dict "key" "dcuResourceMem" "default" "hygon.com/dcumem" "alias" "hcuResourceMem")
  (dict "key" "dcuResourceCores" "default" "hygon.com/dcucores" "alias" "hcuResourceCores")
  (dict "key" "scheduler.deviceConfig.content" "default" "" "alias" "device-config.content" "aliasDefault" "")
  (dict "key" "scheduler.kubeScheduler.extenderHTTPTimeout" "default" "30s" "alias" "scheduler.extenderHTTPTimeout"
        "value" (include "hami.duration" (index $s "extenderHTTPTimeout")))
  (dict "key" "scheduler.extender.port" "default" 8443 "alias" "scheduler.service.httpTargetPort")
  (dict "key" "scheduler.service.httpNodePort" "default" "" "alias" "scheduler.service.schedulerPort")
  (dict "key" "scheduler.service.metricsPort" "default" 9395 "alias" "scheduler.service.monitorPort")
  (dict "key" "devicePlugin.vgpuMonitor.resources" "default" dict "alias" "devicePlugin.monitor.resources")
  (dict "key" "serviceMonitor.enabled" "default" false "alias" "prometheus.enabled" "aliasDefault" false)
  | toJson -}}
{{- end -}}

{{/* (list "key" value) -> "true" or "": a boolean written as HAMi's users write it. */}}
{{- define "hami.bool" -}}
{{- $key := index . 0 -}}{{- $v := index . 1 -}}
{{- if kindIs "bool" $v -}}
{{- if $v -}}true{{- end -}}
{{- else if kindIs "invalid" $v -}}
{{- else if has (toString $v) (list "true" "True" "TRUE" "yes" "Yes" "on" "On" "1" "y") -}}true
{{- else if has (toString $v) (list "false" "False" "FALSE" "no" "No" "off" "Off" "0" "n" "") -}}
{{- else -}}
{{- fail (printf "%s: %v is not a boolean: write true or false" $key $v) -}}
{{- end -}}
{{- end -}}

{{/* A duration as kube-scheduler and hami read it: a number is seconds (HAMi's extenderHTTPTimeout: 30). */}}
{{- define "hami.duration" -}}
{{- if kindIs "invalid" . -}}
{{- else if regexMatch "^[0-9]+(\\.[0-9]+)?$" (toString .) -}}{{ toString . }}s
{{- else -}}{{ toString . }}
{{- end -}}
{{- end -}}

{{/* (list $map "a.b.c") -> {"found": true, "v": value} when the path is there, {"found": false, "v": null} when
     not. (Every map is read with `index`, never `.key`: `helm lint --strict` fails on a missing key.) */}}
{{- define "hami.lookup" -}}
{{- $cur := index . 0 -}}
{{- $found := true -}}
{{- range $part := splitList "." (index . 1) -}}
{{- if and $found (kindIs "map" $cur) (hasKey $cur $part) -}}
{{- $cur = index $cur $part -}}
{{- else -}}
{{- $found = false -}}
{{- end -}}
{{- end -}}
{{- dict "found" $found "v" (ternary $cur nil $found) | toJson -}}
{{- end -}}

{{/* (list $map "a.b.c" value): set a path whose parents exist (making missing parents as maps). */}}
{{- define "hami.setPath" -}}
{{- $cur := index . 0 -}}
{{- $parts := splitList "." (index . 1) -}}
{{- range $part := initial $parts -}}
{{- if not (kindIs "map" (index $cur $part)) -}}{{- $_ := set $cur $part dict -}}{{- end -}}
{{- $cur = index $cur $part -}}
{{- end -}}
{{- $_ := set $cur (last $parts) (index . 2) -}}
{{- end -}}

{{/* (dict "root" $ "key" hami's key "default" its default "alias" HAMi's key ["aliasDefault" x] ["value" HAMi's
     value in hami's form]) -> {"v": the value to use}. hami's key counts as changed when it differs from its
     default. */}}
{{- define "hami.setting" -}}
{{- $values := .root.Values -}}
{{- $mine := (include "hami.lookup" (list $values .key) | fromJson).v -}}
{{- $default := index . "default" -}}
{{- $theirs := include "hami.lookup" (list $values .alias) | fromJson -}}
{{- $given := and $theirs.found (not (kindIs "invalid" $theirs.v)) -}}
{{- if and $given (hasKey . "aliasDefault") -}}
{{- $given = ne (toJson $theirs.v) (toJson .aliasDefault) -}}
{{- end -}}
{{- if and $given (ne .key .alias) -}}
{{- $value := ternary (index . "value") $theirs.v (hasKey . "value") -}}
{{- if and (ne (toJson $mine) (toJson $default)) (ne (toJson $mine) (toJson $value)) -}}
{{- fail (printf "%s (HAMi's key) is %s but %s (hami's) is %s: they set the same thing; keep one of them" .alias (toJson $theirs.v) .key (toJson $mine)) -}}
{{- end -}}
{{- dict "v" $value | toJson -}}
{{- else -}}
{{- dict "v" $mine | toJson -}}
{{- end -}}
{{- end -}}

{{/* (list "key" env) -> a container's env list: HAMi writes a map (NAME: value), hami a list. */}}
{{- define "hami.envList" -}}
{{- $key := index . 0 -}}{{- $env := index . 1 -}}
{{- if kindIs "map" $env -}}
{{- $list := list -}}
{{- range $name := keys $env | sortAlpha -}}
{{- $value := index $env $name -}}
{{- if kindIs "map" $value -}}
{{- $list = append $list (merge (dict "name" $name) $value) -}}
{{- else -}}
{{- $list = append $list (dict "name" $name "value" (toString $value)) -}}
{{- end -}}
{{- end -}}
{{- $list | toJson -}}
{{- else if kindIs "slice" $env -}}
{{- $env | toJson -}}
{{- else if kindIs "invalid" $env -}}
[]
{{- else -}}
{{- fail (printf "%s: expected a list of {name, value} or a map of NAME: value, not %v" $key $env) -}}
{{- end -}}
{{- end -}}

{{/* An image with `registry` in front, replacing a registry host the repository names ("" leaves it). */}}
{{- define "hami.withRegistry" -}}
{{- $registry := trimSuffix "/" (index . 0 | default "") -}}{{- $image := index . 1 -}}
{{- if not $registry -}}
{{- $image -}}
{{- else -}}
{{- $parts := splitList "/" $image -}}
{{- if and (gt (len $parts) 1) (regexMatch "[.:]|^localhost$" (first $parts)) -}}
{{- printf "%s/%s" $registry (join "/" (rest $parts)) -}}
{{- else -}}
{{- printf "%s/%s" $registry $image -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* (list $ component) -> hami's image for scheduler.extender, devicePlugin or devicePlugin.monitor: image.repository
     and image.tag, in global.imageRegistry, else the component's image.registry (HAMi's keys; its docker.io default
     names HAMi's own image and counts as not given). */}}
{{- define "hami.imageOf" -}}
{{- $root := index . 0 -}}
{{- $theirs := (include "hami.lookup" (list $root.Values (printf "%s.image" (index . 1))) | fromJson).v | default dict -}}
{{- $registry := index ($root.Values.global | default dict) "imageRegistry" | default "" -}}
{{- $own := index $theirs "registry" | default "" -}}
{{- if and (not $registry) $own (ne (toString $own) "docker.io") -}}
{{- $registry = $own -}}
{{- end -}}
{{- $repository := include "hami.withRegistry" (list $registry $root.Values.image.repository) -}}
{{- printf "%s:%s" $repository ($root.Values.image.tag | default $root.Chart.AppVersion) -}}
{{- end -}}

{{/* (list $ component) -> pull policy: image.pullPolicy, or the component's image.pullPolicy (HAMi's key). */}}
{{- define "hami.pullPolicyOf" -}}
{{- $setting := dict "root" (index . 0) "key" "image.pullPolicy" "default" "IfNotPresent" "alias" (printf "%s.image.pullPolicy" (index . 1)) "aliasDefault" "IfNotPresent" -}}
{{- (include "hami.setting" $setting | fromJson).v -}}
{{- end -}}

{{/* Every pod's imagePullSecrets: imagePullSecrets, global.imagePullSecrets and HAMi's per-image pullSecrets,
     each a name or {name: ...}. */}}
{{- define "hami.pullSecrets" -}}
{{- $v := .Values -}}
{{- $all := concat ($v.imagePullSecrets | default list) (index ($v.global | default dict) "imagePullSecrets" | default list) -}}
{{- range $component := list "scheduler.extender" "scheduler.kubeScheduler" "devicePlugin" "devicePlugin.monitor" -}}
{{- $image := (include "hami.lookup" (list $v (printf "%s.image" $component)) | fromJson).v | default dict -}}
{{- $all = concat $all (index $image "pullSecrets" | default list) -}}
{{- end -}}
{{- $names := list -}}
{{- range $all -}}
{{- if kindIs "map" . -}}
{{- $names = append $names (index . "name") -}}
{{- else -}}
{{- $names = append $names . -}}
{{- end -}}
{{- end -}}
{{- $secrets := list -}}
{{- range $names | uniq -}}{{- $secrets = append $secrets (dict "name" .) -}}{{- end -}}
{{- $secrets | toJson -}}
{{- end -}}

{{/* Extra managed resources: HAMi's devices.<family>.customresources of the families switched on. */}}
{{- define "hami.customResources" -}}
{{- $names := list -}}
{{- range $family, $device := .Values.devices -}}
{{- if and (kindIs "map" $device) (index $device "enabled") -}}
{{- $names = concat $names (index $device "customresources" | default list) -}}
{{- end -}}
{{- end -}}
{{- $names | toJson -}}
{{- end -}}

{{/* HAMi's keys hami cannot honour: fail naming the key and what to use instead. */}}
{{- define "hami.refuseHAMiKeys" -}}
{{- $v := .Values -}}
{{- $refused := list
  (list "namespaceOverride" "" "install into that namespace with `helm install --namespace`")
  (list "global.managedNodeSelectorEnable" false "hami does not add a node selector to GPU pods; give the pods a nodeSelector, or register only some nodes with scheduler.nodeLabelSelector")
  (list "global.labels" dict "hami's chart adds no labels to every object; set them per Service (scheduler.service.labels, devicePlugin.service.labels) or with a post-renderer")
  (list "global.annotations" dict "hami's chart adds no annotations to every object; set them per pod (scheduler.podAnnotations, devicePlugin.podAnnotations) or with a post-renderer")
  (list "platform.openshift" false "hami's chart makes no SecurityContextConstraints; grant the device plugin's ServiceAccount the privileged SCC yourself")
  (list "selinux.enabled" false "hami's chart does not relabel host directories; label them container_file_t on the nodes")
  (list "podSecurityPolicy.enabled" false "PodSecurityPolicy is gone since Kubernetes 1.25; hami needs 1.26 or newer")
  (list "scheduler.kubeScheduler.enabled" true "hami's extender listens on the pod's loopback for its kube-scheduler sidecar only (docs/architecture.md); keep the sidecar")
  (list "scheduler.networkPolicy.enabled" false "hami makes no NetworkPolicy: its extender is on the pod's loopback, its webhook and /metrics need TLS (scheduler.metricsSecure)")
  (list "devicePlugin.gpuOperatorToolkitReady.enabled" false "hami's chart has no wait for the GPU Operator's toolkit; add an init container with devicePlugin.hamiCore or order the rollout yourself")
  (list "devicePlugin.numaRefit.enabled" false "hami has no /refit: NUMA placement follows enableNumaTopology and kubelet's Topology Manager")
  (list "devicePlugin.hostPIDBroker.enabled" false "hami's device plugin has no host-PID broker")
  (list "devicePlugin.migStrategy" "none" "set MIG per node: \"migstrategy\" in devicePlugin.nodeConfiguration.config")
  (list "mockDevicePlugin.enabled" false "hami's device plugin has --fake-nvml for clusters without GPUs (docs/device-plugin.md)")
  (list "legacyMetrics" false "hami exports HAMi's current metric names only")
  (list "devices.ascend.image" "" "hami's chart does not run Ascend's device plugin; install HAMi's ascend-device-plugin on its own")
  (list "scheduler.extender.image.repository" "projecthami/hami" "hami runs its own image: set image.repository (and image.tag)")
  (list "devicePlugin.image.repository" "projecthami/hami" "hami runs its own image: set image.repository (and image.tag)")
  (list "devicePlugin.monitor.image.repository" "projecthami/hami" "hami runs its own image: set image.repository (and image.tag)")
-}}
{{- range $refused -}}
{{- $key := index . 0 -}}{{- $allowed := index . 1 -}}
{{- $found := include "hami.lookup" (list $v $key) | fromJson -}}
{{- if and $found.found (not (kindIs "invalid" $found.v)) -}}
{{- $value := $found.v -}}
{{- if kindIs "bool" $allowed -}}{{- $value = eq (include "hami.bool" (list $key $value)) "true" -}}{{- end -}}
{{- if and (ne (toJson $value) (toJson $allowed)) (or $value (kindIs "bool" $allowed)) -}}
{{- fail (printf "%s: %s is HAMi's setting, which hami does not support: %s" $key (toJson $found.v) (index . 2)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* HAMi's keys that are set but have no effect here (docs/coming-from-hami.md), for NOTES.txt. */}}
{{- define "hami.ignoredHAMiKeys" -}}
{{- $v := .Values -}}
{{- $ignored := list
  (list "global.imageTag" "names HAMi's release; hami's image tag is image.tag (default: the chart's appVersion)")
  (list "scheduler.extender.image.tag" "names HAMi's release; hami's is image.tag")
  (list "devicePlugin.image.tag" "names HAMi's release; hami's is image.tag")
  (list "devicePlugin.monitor.image.tag" "names HAMi's release; hami's is image.tag")
  (list "scheduler.kubeScheduler.extraArgs" "only for Kubernetes older than 1.22, which hami does not support; use extraNewArgs")
  (list "scheduler.patch.image" "hami's certificate Jobs run hami's own image (`hami certs`)")
  (list "scheduler.patch.imageNew" "hami's certificate Jobs run hami's own image (`hami certs`)")
  (list "scheduler.patch.runAsUser" "hami's certificate Jobs run as scheduler.extender.runAsUser")
  (list "devicePlugin.monitor.resyncInterval" "hami's monitor refreshes every 5 s")
  (list "devicePlugin.monitor.securityContext" "hami's monitor runs with DAC_OVERRIDE only, not SYS_ADMIN")
-}}
{{- $lines := list -}}
{{- range $ignored -}}
{{- $found := include "hami.lookup" (list $v (index . 0)) | fromJson -}}
{{- if $found.v -}}
{{- $lines = append $lines (printf "%s: %s" (index . 0) (index . 1)) -}}
{{- end -}}
{{- end -}}
{{- if eq (toString $v.devicePlugin.nvidiaDriverRoot) "auto" -}}
{{- $lines = append $lines "devicePlugin.nvidiaDriverRoot: \"auto\" reads as \"/\" (a driver installed on the host); with the GPU Operator set its root, e.g. /run/nvidia/driver" -}}
{{- end -}}
{{- if and (hasKey $v.scheduler "livenessProbe") (not (index $v.scheduler "livenessProbe")) -}}
{{- $lines = append $lines "scheduler.livenessProbe: false has no effect: hami's containers always have liveness probes" -}}
{{- end -}}
{{- $lines | toJson -}}
{{- end -}}
