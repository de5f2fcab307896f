"""NVIDIA at admission: HAMi's ``MutateAdmission`` (scheduler-core.md §3.3, webhook-bind-plugin-vendors.md §1.3).

Per container, in HAMi's order:

1. ``gpumem-percentage`` (limits, else requests) must be a whole number in 0..100, else the pod is refused;
2. ``nvidia.com/priority`` in limits → env ``CUDA_TASK_PRIORITY=<value>``;
3. ``gpuCorePolicy`` ``force``/``disable`` → env ``GPU_CORE_UTILIZATION_POLICY=<policy>``;
4. found when the count is in limits; else, when cores, memory or percentage is in limits and
   ``defaultGPUNum > 0``, ``limits[count] = defaultGPUNum`` and found;
5. exclusive default: a count (limits or requests) without cores (limits and requests), with
   ``gpumem-percentage: 100``, or without any memory or percentage (or with no memory resource configured)
   → ``limits[cores] = 100`` and found — so ``nvidia.com/gpu: 1`` alone is a whole, exclusive GPU;
6. (pod level, done by the caller) found → ``runtimeClassName`` when the pod has none;
7. not found and ``overwriteEnv`` → env ``NVIDIA_VISIBLE_DEVICES=none``, so a container without a GPU sees
   none even on a GPU node.

Deliberate differences from HAMi:

* step 3 applies only to containers that got an NVIDIA GPU: HAMi adds the variable to every container of
  every pod, GPU or not (spec §11 item 7), which changes pods that have nothing to do with GPUs;
* step 4 copies the count from ``requests`` when the user put it there (HAMi writes ``defaultGPUNum`` and the
  API server then refuses the pod because its request exceeds its limit);
* environment variables are set, not appended: a variable the container already has is replaced, so a
  second admission of the same pod changes nothing (HAMi appends duplicates).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from hami.devices.admission import ContainerEdit, PodContext, lookup
from hami.devices.nvidia.config import NvidiaConfig
from hami.errors import InvalidInput, QuantityError
from hami.protocol.objects import Container, QuantityValue
from hami.protocol.quantity import quantity_as_int

__all__ = [
    "CUDA_TASK_PRIORITY",
    "GPU_CORE_UTILIZATION_POLICY",
    "NVIDIA_VISIBLE_DEVICES",
    "NvidiaAdmission",
    "NvidiaAdmitter",
]

CUDA_TASK_PRIORITY: Final = "CUDA_TASK_PRIORITY"
GPU_CORE_UTILIZATION_POLICY: Final = "GPU_CORE_UTILIZATION_POLICY"
NVIDIA_VISIBLE_DEVICES: Final = "NVIDIA_VISIBLE_DEVICES"
EXCLUSIVE_CORES: Final = "100"


@dataclass(frozen=True, slots=True)
class NvidiaAdmission:
    """The ``nvidia:`` settings admission reads (HAMi's device-config keys in parentheses)."""

    count: str = "nvidia.com/gpu"  # resourceCountName
    memory: str = "nvidia.com/gpumem"  # resourceMemoryName
    percentage: str = "nvidia.com/gpumem-percentage"  # resourceMemoryPercentageName
    cores: str = "nvidia.com/gpucores"  # resourceCoreName
    priority: str = "nvidia.com/priority"  # resourcePriorityName
    default_gpu_num: int = 1  # defaultGPUNum
    overwrite_env: bool = False  # overwriteEnv
    gpu_core_policy: str = "default"  # gpuCorePolicy: default | force | disable
    runtime_class_name: str = ""  # runtimeClassName

    @classmethod
    def from_config(cls, cfg: NvidiaConfig) -> NvidiaAdmission:
        """The one place admission reads the NVIDIA config."""
        return cls(
            count=cfg.resource_count_name,
            memory=cfg.resource_memory_name,
            percentage=cfg.resource_memory_percentage_name,
            cores=cfg.resource_core_name,
            priority=cfg.resource_priority_name,
            default_gpu_num=cfg.default_gpu_num,
            overwrite_env=cfg.overwrite_env,
            gpu_core_policy=cfg.gpu_core_policy or "default",
            runtime_class_name=cfg.runtime_class_name,
        )


def _whole(value: QuantityValue, field: str, reason: str) -> int:
    try:
        return quantity_as_int(value, field)
    except (InvalidInput, ValueError):  # not a quantity, or not a whole number
        raise QuantityError(field, value, reason) from None


class NvidiaAdmitter:
    """HAMi's NVIDIA ``MutateAdmission``, as an ``Admitter``."""

    __slots__ = ("settings",)

    def __init__(self, settings: NvidiaAdmission) -> None:
        self.settings = settings

    @property
    def runtime_class_name(self) -> str:
        return self.settings.runtime_class_name

    def admit(self, container: Container, field: str, edit: ContainerEdit, pod: PodContext) -> bool:
        s = self.settings
        limits = container.resources.limits

        percentage = lookup(container, edit, s.percentage)
        percent: int | None = None
        if percentage is not None:
            where = f"{field}.{percentage[0]}[{s.percentage}]"
            reason = "must be an integer between 0 and 100"
            percent = _whole(percentage[1], where, reason)
            if not 0 <= percent <= 100:
                raise QuantityError(where, percentage[1], reason)

        env: dict[str, str] = {}
        if s.priority and s.priority in limits:
            where = f"{field}.limits[{s.priority}]"
            env[CUDA_TASK_PRIORITY] = str(_whole(limits[s.priority], where, "must be a whole number"))

        found = s.count in limits
        sized = any(name and name in limits for name in (s.cores, s.memory, s.percentage))
        if not found and sized and s.default_gpu_num > 0:
            requested = container.resources.requests.get(s.count)
            edit.limits[s.count] = str(requested) if requested is not None else str(s.default_gpu_num)
            found = True

        count_given = lookup(container, edit, s.count) is not None
        cores_given = lookup(container, edit, s.cores) is not None
        memory_given = lookup(container, edit, s.memory) is not None
        whole_card = percent == 100 or not s.memory or (not memory_given and percent is None)
        if s.cores and count_given and not cores_given and whole_card:
            edit.limits[s.cores] = EXCLUSIVE_CORES
            found = True

        if found:
            if s.gpu_core_policy not in ("", "default"):
                env[GPU_CORE_UTILIZATION_POLICY] = s.gpu_core_policy
        elif s.overwrite_env:
            env[NVIDIA_VISIBLE_DEVICES] = "none"
        edit.env.update(env)
        return found
