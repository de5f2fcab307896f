{{/* How a pod that fits nowhere preempts pods of lower priority (docs/preemption.md), from scheduler.preemption:
       self      hami evicts the victims itself: verified on every tested version, and the same on 1.38 while the
                 KubeSchedulerConfiguration declares no preemptVerb (it declares one only for extender);
       extender  kube-scheduler calls hami's preempt verb with its candidate nodes (kube-scheduler 1.38 or newer;
                 not yet run against a released Kubernetes, so only by choice);
       off       no preemption for pods asking for hami's devices;
       auto      self: only a verified mechanism.
     extender needs the kube-scheduler's version (its image tag when that is a version, else the cluster's
     .Capabilities.KubeVersion, which is also the tag's default). Gives the resolved mode: extender, self or off. */}}
{{- define "hami.preemption" -}}
{{- $raw := .Values.scheduler.preemption -}}
{{- $mode := toString ($raw | default "auto") -}}
{{- if kindIs "bool" $raw -}}{{/* YAML 1.1 reads an unquoted off (or no, false) as false */}}
{{- $mode = ternary "true" "off" $raw -}}
{{- end -}}
{{- if not (has $mode (list "auto" "extender" "self" "off")) -}}
{{- fail (printf "scheduler.preemption: %s is not one of auto, extender, self, off" $mode) -}}
{{- end -}}
{{- $version := include "hami.kubeSchedulerVersion" . -}}
{{- $verb := semverCompare ">=1.38.0-0" $version -}}
{{- if and (eq $mode "extender") (not $verb) -}}
{{- fail (printf "scheduler.preemption: extender needs kube-scheduler 1.38 or newer, which asks the extender for the victims; this chart runs kube-scheduler %s. Use auto or self" $version) -}}
{{- end -}}
{{- if eq $mode "auto" -}}
self
{{- else -}}
{{- $mode -}}
{{- end -}}
{{- end -}}

{{/* The version of the kube-scheduler sidecar: its image tag when that reads as a version (v1.38.1, 1.38.0-rc.1),
     else the cluster's. */}}
{{- define "hami.kubeSchedulerVersion" -}}
{{- $tag := toString (.Values.scheduler.kubeScheduler.image.tag | default "") -}}
{{- if regexMatch "^v?[0-9]+\\.[0-9]+\\.[0-9]+" $tag -}}
{{- regexFind "^v?[0-9]+\\.[0-9]+\\.[0-9]+(-[0-9A-Za-z.-]+)?" $tag -}}
{{- else -}}
{{- .Capabilities.KubeVersion.Version -}}
{{- end -}}
{{- end -}}
