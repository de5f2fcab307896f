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

{{/* The install-hami-core init container's script (POSIX sh, run in devicePlugin.hamiCore.image): copy every
     libvgpu.so* of $HAMI_CORE_SOURCE into $HAMI_CORE_DEST (the host's <gpuHookPath>/vgpu) when it differs, through a
     temporary file and a rename, so containers still running on the old library keep it; then check the file the
     plugin mounts (libvgpu.so.$LIBVGPU_VERSION, else libvgpu.so) is there and is a shared library (ELF). */}}
{{- define "hami.devicePlugin.installHamiCore" -}}
set -eu
found=""
for source in "$HAMI_CORE_SOURCE"/libvgpu.so*; do
  [ -f "$source" ] || continue
  found=yes
  target="$HAMI_CORE_DEST/$(basename "$source")"
  if cmp -s "$source" "$target"; then
    echo "HAMi-core: $target is up to date"
  else
    cp "$source" "$target.installing"
    chmod 0644 "$target.installing"
    mv -f "$target.installing" "$target"
    echo "HAMi-core: installed $target from $source"
  fi
done
if [ -z "$found" ]; then
  echo "HAMi-core: this image has no libvgpu.so* in $HAMI_CORE_SOURCE (devicePlugin.hamiCore.image, .sourceDir)" >&2
  exit 1
fi
library="$HAMI_CORE_DEST/libvgpu.so.$LIBVGPU_VERSION"
[ -f "$library" ] || library="$HAMI_CORE_DEST/libvgpu.so"
if [ ! -f "$library" ]; then
  echo "HAMi-core: neither $HAMI_CORE_DEST/libvgpu.so.$LIBVGPU_VERSION nor $HAMI_CORE_DEST/libvgpu.so is there; set devicePlugin.libvgpuVersion to the version of the image's library" >&2
  exit 1
fi
if [ "$(od -An -c -N4 "$library" | tr -d ' ')" != "177ELF" ]; then
  echo "HAMi-core: $library is not a shared library (no ELF header)" >&2
  exit 1
fi
echo "HAMi-core: $library checked; the device plugin mounts it into GPU containers"
{{- end -}}
