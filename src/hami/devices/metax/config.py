"""The ``metax:`` section of ``device-config.yaml``: whole GPUs (``resourceCountName``) and sGPU slices (the
``resourceV*`` names); both MetaX vendors are built from it."""

from __future__ import annotations

from pydantic import StrictBool, StrictStr

from hami.devices.configmodel import ConfigModel

__all__ = ["MetaxConfig"]


class MetaxConfig(ConfigModel):
    """``metax:`` — whole GPUs (``resourceCountName``) and sGPU slices (the ``resourceV*`` names)."""

    resource_count_name: StrictStr = "metax-tech.com/gpu"
    resource_v_count_name: StrictStr = "metax-tech.com/sgpu"
    resource_v_memory_name: StrictStr = "metax-tech.com/vmemory"
    resource_v_core_name: StrictStr = "metax-tech.com/vcore"
    sgpu_topology_aware: StrictBool = False
