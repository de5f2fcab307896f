"""``TOY``: a made-up accelerator that uses every extension of the vendor interface the new families need.

It is built from the interface alone (``hami.devices``: ``base``, ``admission``, ``common``) and is used by the
unit tests (``tests/unit/scheduling/test_vendor_extensions.py``) and by one end-to-end bind through the real
control plane (``tests/e2e/test_vendor_lock.py``, via ``tests/e2e/toy_hami.py``). What it does, and which
extension each part exercises:

* inventory derived from ``status.capacity[toy.example/tpu]`` with synthesized ids ``<node>-toy-<i>`` (no
  registration annotation, ``register=""``), no handshake, no to-allocate annotation; the node annotation
  ``toy.example/bonus`` is carried to Fit as ``node_info`` and added to the node score;
* admission: a container asking for ``toy.example/tpu`` in its limits gets its *request* set to the limit
  (``ContainerEdit.requests``, replacing a different value), and the pod annotation ``toy.example/users`` lists
  the containers that use the vendor, each container appending itself to the value the earlier ones set
  (``ContainerEdit.annotations`` read back through ``PodContext``); ``toy.example/mode: forbidden`` is refused;
* the pod option ``toy.example/mode`` is parsed into ``Selector.options``; ``same-card`` puts every container
  of a pod on the card the first one got (``FitContext.chosen``);
* extra pod annotation ``toy.example/assigned`` from the whole decision (``AnnotationContext``): the node, the
  decision time in nanoseconds and, per container name, its device ids;
* its own node lock ``toy.example/node.lock`` with a 120 s expiry (``VendorKeys.lock``, ``lock_expiry_s``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Final

from hami.devices.admission import Admitter, ContainerEdit, PodContext
from hami.devices.base import (
    MEM_PERCENTAGE_UNSET,
    AnnotationContext,
    ContainerRequest,
    FitContext,
    Fitted,
    NodeInventory,
    Selector,
    Unfit,
)
from hami.devices.common import SharedDeviceVendor, fit_shared
from hami.devices.resources import lookup_resource, whole_quantity
from hami.devices.table import DeviceTable
from hami.errors import InvalidInput
from hami.protocol.inventory import DeviceInfo
from hami.protocol.keys import VendorKeys
from hami.protocol.objects import Container, Node

TOY: Final = "TOY"
COUNT: Final = "toy.example/tpu"
MEMORY: Final = "toy.example/tpu-mem"
ALLOCATED: Final = "toy.example/devices-allocated"
ASSIGNED: Final = "toy.example/assigned"
USERS: Final = "toy.example/users"
MODE: Final = "toy.example/mode"
BONUS: Final = "toy.example/bonus"
LOCK: Final = "toy.example/node.lock"
LOCK_EXPIRY_S: Final = 120.0
DEVMEM: Final = 8192
TOY_KEYS: Final = VendorKeys(
    TOY,
    register="",
    handshake=None,
    to_allocate=None,
    allocated=ALLOCATED,
    extra=(ASSIGNED,),
    lock=LOCK,
    lock_expiry_s=LOCK_EXPIRY_S,
)


class _ToyConfig:
    resource_count_name = COUNT
    resource_memory_name = MEMORY
    resource_core_name = ""
    memory_factor = 1


class ToyAdmitter:
    """Sets the count request to the limit and records the container in ``toy.example/users``."""

    runtime_class_name = ""

    def admit(self, container: Container, field: str, edit: ContainerEdit, pod: PodContext) -> bool:
        if COUNT not in container.resources.limits:
            return False
        if pod.annotations.get(MODE) == "forbidden":
            raise InvalidInput(f"metadata.annotations[{MODE}]", "forbidden", "TOY devices refuse this mode")
        limit = str(container.resources.limits[COUNT])
        if str(container.resources.requests.get(COUNT, "")) != limit:
            edit.requests[COUNT] = limit
        users = pod.annotations.get(USERS, "")
        edit.annotations[USERS] = f"{users},{container.name}" if users else container.name
        return True


class ToyVendor(SharedDeviceVendor):
    """The ``TOY`` vendor (see the module docstring)."""

    name = TOY
    keys = TOY_KEYS
    reads_slices = True  # declares its own decode_slices (which finds none)

    def __init__(self) -> None:
        super().__init__(_ToyConfig())

    def parse_request(self, container: Container, field: str) -> ContainerRequest | None:
        count = lookup_resource(container, COUNT)
        if count is None:
            return None
        nums = whole_quantity(f"{field}.{count[0]}[{COUNT}]", count[1], 16, "more devices than a node has")
        memory = lookup_resource(container, MEMORY)
        mem = whole_quantity(f"{field}.{memory[0]}[{MEMORY}]", memory[1], DEVMEM, "more than a card") if memory else 0
        return ContainerRequest(TOY, nums, mem, MEM_PERCENTAGE_UNSET if mem else 100, 0)

    def decode_inventory(self, node: Node) -> NodeInventory | None:
        raw = node.status.capacity.get(COUNT)
        if raw is None:
            return None
        n = whole_quantity(f"status.capacity[{COUNT}]", raw, 64, "more devices than hami accepts")
        name = node.metadata.name
        devices = tuple(DeviceInfo(f"{name}-toy-{i}", i, 4, DEVMEM, 100, "TOY-1", health=True) for i in range(n))
        bonus = node.metadata.annotations.get(BONUS)
        if bonus is None:
            return NodeInventory(devices)
        whole_quantity(f"metadata.annotations[{BONUS}]", bonus, 1000, "a bonus is at most 1000")
        return NodeInventory(devices, node_info={"bonus": bonus})

    def selector(self, annotations: Mapping[str, str]) -> Selector:
        mode = annotations.get(MODE)
        return Selector(options=(("mode", mode),) if mode else ())

    def admitter(self) -> Admitter:
        return ToyAdmitter()

    def fit(self, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Fitted | Unfit:
        if selector.option("mode") == "same-card":
            first = next((placed for placed in ctx.chosen if placed), ())
            if first:
                same = frozenset(p.device.uuid for p in first)
                selector = Selector(use_uuids=same, options=selector.options)
        outcome = fit_shared(table, request, ctx, selector, TOY)
        if isinstance(outcome, Fitted) and "bonus" in ctx.node_info:
            return Fitted(outcome.placements, outcome.score + int(ctx.node_info["bonus"]))
        return outcome

    def extra_annotations(self, ctx: AnnotationContext) -> dict[str, str]:
        per = ";".join(
            f"{name}={'+'.join(d.uuid for d in slot)}" for name, slot in zip(ctx.containers, ctx.devices, strict=True)
        )
        return {ASSIGNED: f"{ctx.node}@{ctx.now_ns}:{per}"}

    def decode_slices(self, annotations: Mapping[str, str]) -> tuple[tuple[str, Hashable], ...]:
        return ()


def toy_node_raw(name: str, tpus: int | str, annotations: Mapping[str, str] | None = None) -> dict[str, object]:
    """A Node as the API returns it, with ``tpus`` TOY devices in its capacity."""
    return {
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "status": {"capacity": {COUNT: str(tpus)}, "allocatable": {COUNT: str(tpus)}},
    }
