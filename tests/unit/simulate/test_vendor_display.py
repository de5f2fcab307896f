"""``hami simulate``'s tables and JSON show every vendor's devices and slices through the vendor interface alone.

ACME (``tests/unit/scheduling/test_plugin_vendor.py``) is a made-up vendor that hands devices out in templates
without positions: its devices show their memory and cores; ``LabelledAcme`` adds the optional ``SliceLabels``
hook, as NVIDIA's MIG does, and its slices are named.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence

from hami.devices.base import SliceLabels, Vendor
from hami.protocol.inventory import DeviceInfo
from hami.scheduling.decide import decide, reserve
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState
from hami.scheduling.usage import Kind
from hami.simulate.report import render_json, render_placements, render_utilization
from hami.simulate.simulator import Outcome
from tests.unit.scheduling.builders import container, pod
from tests.unit.scheduling.test_plugin_vendor import ACME, COUNT, MEMORY, AcmeVendor, Templates, _node


class LabelledTemplates(Templates):
    slice_kind = "vNPU"

    def slice_labels(self, info: DeviceInfo, positions: Sequence[Hashable]) -> list[str]:
        return [f"{info.type}:{p}" for p in positions]


class LabelledAcme(AcmeVendor):
    partitions = LabelledTemplates()


def placed(vendor: Vendor) -> tuple[ClusterState, list[Outcome]]:
    state = ClusterState({ACME: vendor})
    state.upsert_node(_node("node-a", 2, "slow"))
    p = pod([container({COUNT: 1, MEMORY: 5000})], uid="u-1", name="acme-pod")
    req = prefilter(p, state.vendors, SchedulingDefaults())
    decision = decide(state, req, ["node-a"], 100)
    reserve(state, req, decision)
    return state, [Outcome(p.key, "pods.yaml", decision.message, decision, containers=(("c", Kind.APP),))]


def test_a_vendor_without_labels_shows_its_template() -> None:
    assert isinstance(AcmeVendor().partitions, Templates)
    assert not isinstance(AcmeVendor().partitions, SliceLabels)
    state, outcomes = placed(AcmeVendor())
    rows = render_placements(outcomes, state)
    assert rows[1].split(None, 2)[2] == "node-a-acme-0 (8192 MiB, 50%, slice vir08)"  # the slice by its template name
    utilization = render_utilization(state)
    assert utilization[1].split() == ["node-a", "node-a-acme-0", "slow", "1/1", "8192/16384", "50/100"]
    doc = json.loads(render_json(state, outcomes))
    assert [(u["vendor"], u["uuid"], u["mig"], u["slices"]) for u in doc["utilization"]] == [
        (ACME, "node-a-acme-0", None, None),
        (ACME, "node-a-acme-1", None, None),
    ]
    assert doc["decisions"][0]["devices"] == [
        [{"uuid": "node-a-acme-0", "vendor": ACME, "memoryMiB": 8192, "cores": 50}]
    ]


def test_a_vendor_with_labels_names_its_slices() -> None:
    state, outcomes = placed(LabelledAcme())
    assert render_placements(outcomes, state)[1].endswith("node-a-acme-0 (8192 MiB, 50%, vNPU slow:None)")
    utilization = render_utilization(state)
    # this vendor records no positions, so its hook has nothing to name: as a MIG GPU without instances
    assert utilization[1].endswith("vNPU: no instances")
    assert utilization[2].endswith("vNPU: no instances")
    doc = json.loads(render_json(state, outcomes))
    assert [u["slices"] for u in doc["utilization"]] == [[], []]
    assert [u["mig"] for u in doc["utilization"]] == [None, None]  # "mig" stays NVIDIA's MIG only
