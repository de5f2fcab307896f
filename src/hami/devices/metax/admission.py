"""MetaX sGPU at admission (HAMi v2.10 ``metax/sdevice.go`` ``MutateAdmission``).

A container uses sGPUs iff ``metax-tech.com/sgpu`` is in its limits. Then:

* a pod app class (``metax-tech.com/sgpu-app-class``) must be ``online`` or ``offline``, and such a pod asks for
  exactly one device;
* a pod that is not ``online`` needs a QoS policy (``metax-tech.com/sgpu-qos-policy``): ``best-effort``,
  ``fixed-share`` or ``burst-share``; when the pod has none, the webhook sets ``best-effort``.

Deliberate difference: HAMi answers a bad value with a webhook error (HTTP 500, the pod is then admitted or
refused by the failure policy); hami denies the pod with the message, so ``kubectl apply`` shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from hami.devices.admission import ContainerEdit, PodContext
from hami.devices.resources import whole_quantity
from hami.errors import InvalidInput
from hami.protocol.objects import Container
from hami.protocol.quantity import INT32_MAX

__all__ = ["APP_CLASS", "APP_CLASSES", "BEST_EFFORT", "QOS_POLICIES", "QOS_POLICY", "SgpuAdmitter"]

QOS_POLICY: Final = "metax-tech.com/sgpu-qos-policy"
APP_CLASS: Final = "metax-tech.com/sgpu-app-class"
BEST_EFFORT: Final = "best-effort"
QOS_POLICIES: Final = (BEST_EFFORT, "fixed-share", "burst-share")
APP_CLASSES: Final = ("online", "offline")


@dataclass(frozen=True, slots=True)
class SgpuAdmitter:
    """Validates the app class and QoS policy of a pod using sGPUs, and sets the default QoS policy."""

    count: str
    runtime_class_name: str = ""

    def admit(self, container: Container, field: str, edit: ContainerEdit, pod: PodContext) -> bool:
        raw = edit.limits.get(self.count, container.resources.limits.get(self.count)) if self.count else None
        if raw is None:
            return False
        app_class = pod.annotations.get(APP_CLASS)
        if app_class is not None:
            if app_class not in APP_CLASSES:
                raise InvalidInput(APP_CLASS, app_class, f"must be set one of [{', '.join(APP_CLASSES)}]")
            where = f"{field}.limits[{self.count}]"
            count = whole_quantity(where, raw, INT32_MAX, "exceeds the int32 range HAMi's annotations can carry")
            if count != 1:
                raise InvalidInput(where, raw, f"app-class pod must request single device ({APP_CLASS})")
        if app_class != "online":
            qos = pod.annotations.get(QOS_POLICY, edit.annotations.get(QOS_POLICY))
            if qos is None:
                edit.annotations[QOS_POLICY] = BEST_EFFORT
            elif qos not in QOS_POLICIES:
                raise InvalidInput(QOS_POLICY, qos, f"must be set one of [{', '.join(QOS_POLICIES)}]")
        return True
