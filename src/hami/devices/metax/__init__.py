"""MetaX: two vendors from the ``metax:`` config section — whole cards (``Metax-GPU``, ``gpu``) and shared slices
of a card (``Metax-SGPU``, ``sgpu``). See each module's docstring."""

from __future__ import annotations

from hami.devices.metax.gpu import GPU, GPU_KEYS, MetaxGpuVendor
from hami.devices.metax.sgpu import SGPU_KEYS, MetaxSgpuVendor
from hami.devices.metax.wire import SGPU

__all__ = ["GPU", "GPU_KEYS", "SGPU", "SGPU_KEYS", "MetaxGpuVendor", "MetaxSgpuVendor"]
