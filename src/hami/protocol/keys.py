"""Every vendor-neutral annotation and label key hami reads or writes, and NVIDIA's, in one place (spec:
scheduler-core.md §2.1, §2.10).

No other module spells these strings; import the constants. NVIDIA's keys are here because the wire codecs and the
node agent share them; every other vendor's keys (``VendorKeys`` and its pod filters) live in its own module in
``hami.devices``.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BIND_PHASE",
    "BIND_TIME",
    "CAPACITY_FREED",
    "DEVICE_CORDON",
    "DEVICE_PLUGIN_PODS_TAINT",
    "DEVICE_SCORING_WEIGHTS",
    "DRA_LABEL",
    "DRA_REQUESTS",
    "GPU_SCHEDULER_POLICY",
    "NODE_LOCK",
    "NODE_SCHEDULER_POLICY",
    "NVIDIA_HANDSHAKE",
    "NVIDIA_MIG_ALLOCATIONS",
    "NVIDIA_NOUSE_GPUTYPE",
    "NVIDIA_NOUSE_GPUUUID",
    "NVIDIA_NUMA_BIND",
    "NVIDIA_REGISTER",
    "NVIDIA_SCORE",
    "NVIDIA_USE_GPUTYPE",
    "NVIDIA_USE_GPUUUID",
    "NVIDIA_VGPU_MODE",
    "POD_GROUP_LABEL",
    "PREEMPTED_FOR",
    "SCHEDULER_ROLE_LABEL",
    "VGPU_NODE",
    "VGPU_TIME",
    "WEBHOOK_IGNORE_LABEL",
    "VendorKeys",
]

# --- pod annotations written by the scheduler -------------------------------------------------
VGPU_NODE: Final = "hami.io/vgpu-node"  # annotation and label: the node chosen by Filter
VGPU_TIME: Final = "hami.io/vgpu-time"  # Filter decision time, Unix seconds
BIND_PHASE: Final = "hami.io/bind-phase"  # allocating | success | failed
BIND_TIME: Final = "hami.io/bind-time"  # Bind time, Unix seconds
PREEMPTED_FOR: Final = "hami.io/preempted-for"  # hami's own: on a victim, the preemptor's <namespace>/<name>
NVIDIA_MIG_ALLOCATIONS: Final = "hami.io/vgpu-mig-allocations"

# --- node annotations -------------------------------------------------------------------------
NODE_LOCK: Final = "hami.io/mutex.lock"
CAPACITY_FREED: Final = "hami.io/capacity-freed"  # hami's own (HAMi has none): its leader freed capacity here, then
# (RFC 3339 time); the Node event makes kube-scheduler retry the pods hami turned down (hami.scheduling.requeue)
DEVICE_CORDON: Final = "hami.io/device-cordon"
NVIDIA_REGISTER: Final = "hami.io/node-nvidia-register"
NVIDIA_SCORE: Final = "hami.io/node-nvidia-score"
NVIDIA_HANDSHAKE: Final = "hami.io/node-handshake"

# --- DRA device taints ------------------------------------------------------------------------
# hami's own: hami's DRA plugin holds a card back from claims (NoSchedule) while pods hami placed through the
# device plugin hold shares of it (docs/dra-mode-switching.md)
DEVICE_PLUGIN_PODS_TAINT: Final = "hami.io/device-plugin-pods"

# --- pod annotations and labels set by users --------------------------------------------------
NVIDIA_USE_GPUTYPE: Final = "nvidia.com/use-gputype"
NVIDIA_NOUSE_GPUTYPE: Final = "nvidia.com/nouse-gputype"
NVIDIA_USE_GPUUUID: Final = "nvidia.com/use-gpuuuid"
NVIDIA_NOUSE_GPUUUID: Final = "nvidia.com/nouse-gpuuuid"
NVIDIA_NUMA_BIND: Final = "nvidia.com/numa-bind"
NVIDIA_VGPU_MODE: Final = "nvidia.com/vgpu-mode"
GPU_SCHEDULER_POLICY: Final = "hami.io/gpu-scheduler-policy"
NODE_SCHEDULER_POLICY: Final = "hami.io/node-scheduler-policy"
DEVICE_SCORING_WEIGHTS: Final = "hami.io/device-scoring-weights"
POD_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
WEBHOOK_IGNORE_LABEL: Final = "hami.io/webhook"  # value "ignore" excludes an object from the webhook
SCHEDULER_ROLE_LABEL: Final = "hami.io/scheduler-role"
DRA_LABEL: Final = "hami.io/dra"  # label "true": the pod took DRA mode (issue 38; HAMi-DRA's label)
DRA_REQUESTS: Final = "hami.io/dra-requests"  # the original HAMi request of each of a DRA-mode pod's claims (JSON)


class VendorKeys:
    """The per-vendor annotation keys (scheduler-core.md §2.10). One instance per vendor.

    * ``register`` — the node's registration annotation (``""`` for a vendor whose devices come from the node's
      capacity); ``handshake`` — the node handshake annotation, ``None`` for a vendor without a handshake;
    * ``to_allocate``/``allocated`` — the pod's allocation annotations (``to_allocate`` None when there is one);
    * ``extra`` — further pod annotations the scheduler writes for this vendor (removed with the allocation);
    * ``lock`` — the node lock annotation the vendor's device plugin honours (HAMi's ``hami.io/mutex.lock``, a
      vendor's own such as Cambricon's ``cambricon.com/dsmlu.lock``, or ``None`` for none); ``/bind`` takes each
      distinct lock of the vendors a pod uses, in sorted order;
    * ``lock_expiry_s`` — after how many seconds that lock counts as expired (taken over by the next bind);
      ``None``: the configured ``--node-lock-timeout``.
    """

    __slots__ = ("allocated", "extra", "handshake", "lock", "lock_expiry_s", "register", "to_allocate", "vendor")

    def __init__(
        self,
        vendor: str,
        register: str,
        handshake: str | None,
        to_allocate: str | None,
        allocated: str,
        extra: tuple[str, ...] = (),
        lock: str | None = NODE_LOCK,
        lock_expiry_s: float | None = None,
    ) -> None:
        self.vendor = vendor
        self.register = register
        self.handshake = handshake
        self.to_allocate = to_allocate
        self.allocated = allocated
        self.extra = extra
        self.lock = lock
        self.lock_expiry_s = lock_expiry_s

    def __repr__(self) -> str:
        return f"VendorKeys({self.vendor!r})"


NVIDIA_KEYS: Final = VendorKeys(
    "NVIDIA",
    register=NVIDIA_REGISTER,
    handshake=NVIDIA_HANDSHAKE,
    to_allocate="hami.io/vgpu-devices-to-allocate",
    allocated="hami.io/vgpu-devices-allocated",
    extra=(NVIDIA_MIG_ALLOCATIONS,),
)
__all__ += ["NVIDIA_KEYS"]
