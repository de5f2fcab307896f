"""DRA mode's parts, built from the scheduler's settings (``--dra-mode``, ``--dra-device-class``; docs/dra-mode.md).

The decisions are pure (``hami.scheduling.dra.translate``): ``DraAdmission`` answers ``/webhook/dra`` (today's
admission first, over the extender's vendors, defaults and quota book, as ``/webhook``), and ``claim_spec``
re-translates a pod's recorded request into its claim's spec for the claim controller (``hami.server.draclaims``).

Both are given the card memory sizes ``--dra-card-memory`` names, else those hami's DRA driver publishes now
(``DraLedger.memory_sizes``: the ResourceSlices hami counts), so a ``gpumem-percentage`` request becomes one
alternative per card size (``firstAvailable``). At most ``MAX_ALTERNATIVES`` sizes, the smallest: a cluster with
more distinct card sizes serves such a request on those.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hami.config import SchedulerSettings
from hami.devices.dra import DEFAULT_DRA_DRIVER, MAX_ALTERNATIVES
from hami.scheduling.admission import Admission, AdmissionSettings
from hami.scheduling.dra.podclaims import Translate
from hami.scheduling.dra.translate import DraAdmission, DraModeSettings, DraVerdict, claim_spec
from hami.server.extender import Extender
from hami.server.webhook import admission_for

__all__ = ["LiveDraAdmission", "dra_settings", "dra_translate"]


def dra_settings(settings: SchedulerSettings, extender: Extender) -> DraModeSettings:
    """The translation's settings now: the DeviceClass the claims name (``--dra-device-class``) and the card
    memory sizes: ``--dra-card-memory``, else those hami's driver publishes."""
    sizes = settings.dra_card_memory or extender.dra.memory_sizes(DEFAULT_DRA_DRIVER)[:MAX_ALTERNATIVES]
    return DraModeSettings(device_class=settings.dra_device_class, card_memory_mib=sizes)


class LiveDraAdmission:
    """``/webhook/dra``'s decision: ``/webhook``'s admission, then the translation with the settings of the moment."""

    def __init__(self, extender: Extender, settings: SchedulerSettings) -> None:
        self.extender = extender
        self.settings = settings
        self.admission: Admission = admission_for(
            extender, AdmissionSettings(settings.scheduler_name, settings.force_overwrite_default_scheduler)
        )

    def review(self, raw_pod: Mapping[str, Any], namespace: str, suffix: Callable[[], str]) -> DraVerdict:
        mode = dra_settings(self.settings, self.extender)
        return DraAdmission(self.admission, mode).review(raw_pod, namespace, suffix)


def dra_translate(extender: Extender, settings: SchedulerSettings) -> Translate:
    """The claim controller's re-translation: one recorded request → the claim's spec."""

    def translate(request: Mapping[str, Any]) -> Mapping[str, Any]:
        return claim_spec(request, extender.vendors, dra_settings(settings, extender))

    return translate
