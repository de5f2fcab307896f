{{/* The pod annotations the allocation policy guards (allocation-policy.yaml, docs/trust.md), as CEL lists: the
     output of hami.devices.allocation_keys() over hami's vendor registry. tests/chart/test_allocation_policy.py
     fails, printing the lists to paste here, when a vendor's keys change. */}}

{{/* What only hami's scheduler writes: the node it chose, its decision and bind times, each vendor's allocation. */}}
{{- define "hami.schedulerAllocationKeys" -}}
[
  "hami.io/Ascend310P-devices-allocated",
  "hami.io/Ascend910A-devices-allocated",
  "hami.io/Ascend910B2-devices-allocated",
  "hami.io/Ascend910B3-devices-allocated",
  "hami.io/Ascend910B4-1-devices-allocated",
  "hami.io/Ascend910B4-devices-allocated",
  "hami.io/Ascend910C-devices-allocated",
  "hami.io/BI-V100-devices-allocated",
  "hami.io/BI-V150-devices-allocated",
  "hami.io/Biren-devices-allocated",
  "hami.io/MR-V100-devices-allocated",
  "hami.io/MR-V50-devices-allocated",
  "hami.io/Vastai-devices-allocated",
  "hami.io/amd-devices-allocated",
  "hami.io/aws-neuron-devices-allocated",
  "hami.io/bind-time",
  "hami.io/cambricon-mlu-devices-allocated",
  "hami.io/dcu-devices-allocated",
  "hami.io/enflame-gcu-devices-allocated",
  "hami.io/enflame-vgpu-devices-allocated",
  "hami.io/kunlun-allocated",
  "hami.io/metax-gpu-devices-allocated",
  "hami.io/metax-sgpu-devices-allocated",
  "hami.io/mthreads-vgpu-devices-allocated",
  "hami.io/vgpu-devices-allocated",
  "hami.io/vgpu-node",
  "hami.io/vgpu-time",
  "hami.io/xpu-devices-allocated"
]
{{- end -}}

{{/* What the device plugin of the pod's own node writes too: the bind phase, each vendor's to-allocate (consumed as
     containers start) and its hami.io/ extras (NVIDIA's MIG placements). */}}
{{- define "hami.pluginAllocationKeys" -}}
[
  "hami.io/Ascend310P-devices-to-allocate",
  "hami.io/Ascend910A-devices-to-allocate",
  "hami.io/Ascend910B2-devices-to-allocate",
  "hami.io/Ascend910B3-devices-to-allocate",
  "hami.io/Ascend910B4-1-devices-to-allocate",
  "hami.io/Ascend910B4-devices-to-allocate",
  "hami.io/Ascend910C-devices-to-allocate",
  "hami.io/BI-V100-devices-to-allocate",
  "hami.io/BI-V150-devices-to-allocate",
  "hami.io/Biren-devices-to-allocate",
  "hami.io/MR-V100-devices-to-allocate",
  "hami.io/MR-V50-devices-to-allocate",
  "hami.io/Vastai-devices-to-allocate",
  "hami.io/amd-devices-to-allocate",
  "hami.io/bind-phase",
  "hami.io/cambricon-mlu-devices-to-allocate",
  "hami.io/dcu-devices-to-allocate",
  "hami.io/enflame-gcu-devices-to-allocate",
  "hami.io/metax-gpu-devices-to-allocate",
  "hami.io/metax-sgpu-devices-to-allocate",
  "hami.io/vgpu-devices-to-allocate",
  "hami.io/vgpu-mig-allocations",
  "hami.io/xpu-devices-to-allocate"
]
{{- end -}}
