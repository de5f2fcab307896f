"""DRA mode's parts, built from the scheduler's settings (``--dra-mode``, ``--dra-device-class``; docs/dra-mode.md).

The decisions are pure (``hami.scheduling.dra.translate``): ``DraAdmission`` answers ``/webhook/dra``, and
``claim_spec`` re-translates a pod's recorded request into its claim's spec for the claim controller
(``hami.server.draclaims``). Both see the extender's vendors, defaults and quota book, as ``/webhook`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami.config import SchedulerSettings
from hami.scheduling.dra.podclaims import Translate
from hami.scheduling.dra.translate import DraAdmission, DraModeSettings, claim_spec
from hami.server.extender import Extender

__all__ = ["dra_admission", "dra_settings", "dra_translate"]


def dra_settings(settings: SchedulerSettings) -> DraModeSettings:
    """The translation's settings from the scheduler's."""
    return DraModeSettings(scheduler_name=settings.scheduler_name, device_class=settings.dra_device_class)


def dra_admission(extender: Extender, settings: SchedulerSettings) -> DraAdmission:
    """``/webhook/dra``'s decision over the extender's vendors, defaults and quota book."""
    return DraAdmission(
        vendors=extender.vendors,
        defaults=extender.defaults,
        settings=dra_settings(settings),
        quotas=extender.state.quotas,
        quota_factors=extender.state.quota_factors,
    )


def dra_translate(extender: Extender, settings: SchedulerSettings) -> Translate:
    """The claim controller's re-translation: one recorded request → the claim's spec."""
    mode = dra_settings(settings)

    def translate(request: Mapping[str, Any]) -> Mapping[str, Any]:
        return claim_spec(request, extender.vendors, mode)

    return translate
