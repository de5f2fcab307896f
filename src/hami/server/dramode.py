"""DRA mode's parts, built from the scheduler's settings (``--dra-mode``, ``--dra-device-class``; docs/dra-mode.md).

The decisions are pure (``hami.scheduling.dra.translate``): ``DraAdmission`` answers ``/webhook/dra`` (today's
admission first, over the extender's vendors, defaults and quota book, as ``/webhook``), and ``claim_spec``
re-translates a pod's recorded request into its claim's spec for the claim controller (``hami.server.draclaims``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami.config import SchedulerSettings
from hami.scheduling.admission import AdmissionSettings
from hami.scheduling.dra.podclaims import Translate
from hami.scheduling.dra.translate import DraAdmission, DraModeSettings, claim_spec
from hami.server.extender import Extender
from hami.server.webhook import admission_for

__all__ = ["dra_admission", "dra_settings", "dra_translate"]


def dra_settings(settings: SchedulerSettings) -> DraModeSettings:
    """The translation's settings from the scheduler's: the DeviceClass the claims name (``--dra-device-class``).
    No card memory sizes are given, so a ``gpumem-percentage`` request is refused with its reason."""
    return DraModeSettings(device_class=settings.dra_device_class)


def dra_admission(extender: Extender, settings: SchedulerSettings) -> DraAdmission:
    """``/webhook/dra``'s decision: ``/webhook``'s admission, then the translation."""
    admission = admission_for(
        extender, AdmissionSettings(settings.scheduler_name, settings.force_overwrite_default_scheduler)
    )
    return DraAdmission(admission, dra_settings(settings))


def dra_translate(extender: Extender, settings: SchedulerSettings) -> Translate:
    """The claim controller's re-translation: one recorded request → the claim's spec."""
    mode = dra_settings(settings)

    def translate(request: Mapping[str, Any]) -> Mapping[str, Any]:
        return claim_spec(request, extender.vendors, mode)

    return translate
