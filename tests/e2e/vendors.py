"""One pod of a vendor family bound through the real kube-scheduler and hami: the harness each family plugs into.

A family describes itself with a ``FamilyCase`` in ``FAMILY_CASES``, keyed by the case's name: the family's
``hami.devices.FAMILIES`` key, or ``<family>-<vendor>`` where the family has several vendors (``metax-gpu`` and
``metax-sgpu``); ``family`` is the FAMILIES key (it picks the switches hami runs with), ``vendor`` the vendor key:

* ``node(name)`` — what a fake node holding that family's devices carries (``FakeNode``): its registration
  annotation(s) as the family's device plugin writes them, and/or the ``status.capacity`` its devices are derived
  from (for families without a registration annotation);
* ``limits`` — one container's resource limits asking for one device of the family, in its own units;
* ``expected(node)`` — the allocation (and extra) annotations the bound pod must carry, byte for byte as HAMi
  writes them (the family's device plugin reads them);
* ``times`` — annotations holding the decision time, each with its units per second (``10**9``: Unix nanoseconds):
  the value is checked against ``hami.io/vgpu-time`` (the same decision, in seconds);
* ``pod_annotations`` — annotations the pod is created with (a vendor option such as MetaX's QoS policy);
* ``one_container`` — only one container of a pod can hold the family's devices (HAMi's MetaX whole cards: every
  container of a pod must use the card the first one took, and a card is held whole), so the mixed pod gives the
  family's devices to one container only.

A family whose vendor takes no node lock (``VendorKeys.lock`` None: Moore Threads, MetaX whole cards …) is checked
to have left no lock on the node; the others to have had it released by the plugin stand-in.

``VendorStack`` (fixture ``vendor_stack(*families)`` in ``conftest.py``) runs ``hami scheduler`` with the switches
those families need (``--enable-ascend`` …), kube-scheduler calling it with every resource name of the device
config managed (as the chart's ``managedResources``), and a device-plugin stand-in (``FakeDevicePlugin``)
releasing every registered vendor's node lock (``VendorKeys.lock``: HAMi's ``hami.io/mutex.lock`` or the vendor's
own) after bind, as the family's plugin does after Allocate. Pods go through hami's own admission decision first
(the webhook's code, in-process: defaults and rewrites applied; the webhook over TLS has its own test in
``test_webhook.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hami.config import default_device_config
from hami.config.settings import GATED_FAMILIES
from hami.devices import vendors_from_config
from hami.devices.base import Vendor
from hami.devices.cambricon import CAMBRICON_KEYS, DSMLU_ASSIGNED, DSMLU_PROFILE
from hami.devices.hygon import HYGON_KEYS
from hami.devices.mthreads import GPU_INDEX, MTHREADS_KEYS, PREDICATE_NODE, PREDICATE_TIME
from hami.protocol import keys
from hami.protocol.allocation import PodDevices
from hami.protocol.inventory import DeviceInfo, encode_inventory_json
from hami.scheduling.admission import Admission, AdmissionSettings, admitters_for
from hami.scheduling.request import SchedulingDefaults
from hami.simulate.admit import Admitted, admit_pod, apply_patch
from hami.simulate.simulator import known_resource_names
from tests.e2e.cluster import ControlPlane, KubeClient, Scheduler
from tests.e2e.hami_stack import SCHEDULER_NAME, FakeDevicePlugin, HamiScheduler, extender_config, register_annotation

IMAGE = "registry.invalid/hami-e2e:none"  # never pulled: there is no kubelet


@dataclass(frozen=True)
class FakeNode:
    """What a fake node of one family carries: annotations (its registration) and extended ``status.capacity``."""

    annotations: Mapping[str, str] = field(default_factory=dict)
    capacity: Mapping[str, int | str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FamilyCase:
    """How the harness binds one pod of a family (see the module docstring)."""

    family: str
    vendor: str
    node: Callable[[str], FakeNode]
    limits: Mapping[str, int | str]
    expected: Callable[[str], Mapping[str, str]]
    pod_annotations: Mapping[str, str] = field(default_factory=dict)
    times: Mapping[str, int] = field(default_factory=dict)
    one_container: bool = False


def _nvidia_node(name: str) -> FakeNode:
    return FakeNode({keys.NVIDIA_REGISTER: register_annotation(name, 2, 24000)}, {"nvidia.com/gpu": 20})


def _nvidia_expected(node: str) -> dict[str, str]:
    value = f"GPU-{node}-0,NVIDIA,3000,30:;"
    return {keys.NVIDIA_KEYS.allocated: value, keys.NVIDIA_KEYS.to_allocate or "": value}


def _hygon_node(name: str) -> FakeNode:
    # HAMi's DCU plugin writes the legacy colon format: ID,Count,Devmem,Devcore,Type,Numa,Health,Index,Mode:
    register = "".join(f"DCU-{name}-{i},4,16368,100,DCU-Z100L,0,true,{i},hami-core:" for i in range(2))
    return FakeNode({HYGON_KEYS.register: register}, {"hygon.com/dcunum": 8})


def _hygon_expected(node: str) -> dict[str, str]:
    value = f"DCU-{node}-0,DCU,2000,40:;"
    return {HYGON_KEYS.allocated: value, HYGON_KEYS.to_allocate or "": value}


def _cambricon_node(name: str) -> FakeNode:
    # Cambricon's plugin registers no annotation: two MLU370s in the capacity (200 core units, 2 × 96 memory units)
    return FakeNode(
        {}, {"cambricon.com/vmlu": 200, "cambricon.com/mlu.smlu.vcore": 200, "cambricon.com/mlu.smlu.vmemory": 192}
    )


def _cambricon_expected(node: str) -> dict[str, str]:
    value = f"{node}-cambricon-mlu-0,MLU,2048,30:;"
    return {
        CAMBRICON_KEYS.allocated: value,
        CAMBRICON_KEYS.to_allocate or "": value,
        DSMLU_ASSIGNED: "false",
        DSMLU_PROFILE: "0_30_8",
    }


def _mthreads_node(name: str) -> FakeNode:
    # Moore Threads' plugin registers no annotation: 32 sgpu-core units are two cards of 16, each with
    # 192 × 512 × 16 // 32 = 49152 MiB
    return FakeNode({}, {"mthreads.com/sgpu-core": 32, "mthreads.com/sgpu-memory": 192})


def _mthreads_expected(node: str) -> dict[str, str]:
    # 8 memory units of 512 MiB and 4 core units on the first idle card; gpu-index is that card's index
    return {
        MTHREADS_KEYS.allocated: f"{node}-mthreads-0,Mthreads,4096,4:;",
        GPU_INDEX: "0",
        PREDICATE_NODE: node,
    }


def _iluvatar_node(name: str) -> FakeNode:
    # the MR-V100 plugin's legacy string: ID,Count,Devmem,Devcore,Type,Numa,Health,Index,Mode:
    register = "".join(f"{name}-{i},4,32768,100,MR-V100,0,true,{i},hami-core:" for i in range(2))
    return FakeNode({"hami.io/node-MR-V100-register": register}, {"iluvatar.ai/MR-V100-vgpu": 8})


def _iluvatar_expected(node: str) -> dict[str, str]:
    value = f"{node}-0,MR-V100,4096,50:;"  # 16 vMem units of 256 MiB
    return {"hami.io/MR-V100-devices-allocated": value, "hami.io/MR-V100-devices-to-allocate": value}


def _metax_gpu_node(name: str) -> FakeNode:
    return FakeNode({}, {"metax-tech.com/gpu": 2})  # MetaX's whole cards: the capacity only


def _metax_gpu_expected(node: str) -> dict[str, str]:
    value = f"{node}-metax-0,Metax-GPU,65536,100:;"
    return {"hami.io/metax-gpu-devices-allocated": value, "hami.io/metax-gpu-devices-to-allocate": value}


def _metax_node(name: str) -> FakeNode:
    device = {"uuid": f"{name}-0", "totalDevCount": 4, "totalCompute": 100, "totalVRam": 65536, "healthy": True}
    return FakeNode({"metax-tech.com/node-gpu-devices": json.dumps([device])}, {"metax-tech.com/sgpu": 4})


def _metax_expected(node: str) -> dict[str, str]:
    return {
        "hami.io/metax-sgpu-devices-allocated": f"{node}-0,Metax-SGPU,8192,30:;",
        "metax-tech.com/gpu-devices-allocated": f'[[{{"uuid":"{node}-0","compute":30,"vRam":8192}}]]',
    }


ASCEND = "Ascend910B3"


def _ascend_node(name: str) -> FakeNode:
    # one 910B3 as HAMi's Ascend plugin registers it (Go's key spelling, a NetworkID)
    device = {
        "ID": f"{name}-npu-0", "Index": 0, "Count": 4, "Devmem": 65536, "Devcore": 20, "Type": ASCEND,
        "Health": True, "CustomInfo": {"NetworkID": 0},
    }  # fmt: skip
    register = json.dumps([device], separators=(",", ":"))
    return FakeNode({f"hami.io/node-register-{ASCEND}": register}, {f"huawei.com/{ASCEND}": 8})


def _ascend_expected(node: str) -> dict[str, str]:
    # the webhook rounds 16000 up to the vir05_1c_16g template's 16384
    value = f"{node}-npu-0,{ASCEND},16384,0:;"
    return {
        f"hami.io/{ASCEND}-devices-allocated": value,
        f"hami.io/{ASCEND}-devices-to-allocate": value,
        f"huawei.com/{ASCEND}": f'[{{"UUID":"{node}-npu-0","temp":"vir05_1c_16g","memory":16384}}]',
    }


def _kunlun_xpu_node(name: str) -> FakeNode:
    return FakeNode({}, {"kunlunxin.com/xpu": 8})  # whole XPUs: the capacity only


def _kunlun_xpu_expected(node: str) -> dict[str, str]:
    # an idle board: one card of the tightest wing, left first
    return {"hami.io/kunlun-allocated": f"{node}-kunlun-0,kunlun,98304,100:;", "BAIDU_COM_DEVICE_IDX": "0"}


def _kunlun_node(name: str) -> FakeNode:
    # vXPU: eight P800-OAMs in two wings of four, as the XPU plugin registers them
    register = encode_inventory_json(
        DeviceInfo(f"XPU-{name}-{i}", i, 4, 98304, 100, "P800-OAM", i // 4, health=True) for i in range(8)
    )
    return FakeNode({"hami.io/node-register-xpu": register}, {"kunlunxin.com/vxpu": 32})


def _kunlun_expected(node: str) -> dict[str, str]:
    value = f"XPU-{node}-0,XPU,24576,25:;"  # 20000 MiB rounded up to a quarter card, its cores following
    return {"hami.io/xpu-devices-allocated": value, "hami.io/xpu-devices-to-allocate": value}


def _enflame_node(name: str) -> FakeNode:
    # DRS: one GCU (index 0, minor 3) of 6 slices and its profiles, in the plugin's capacity annotation
    capacity = {
        "devices": [{"index": "0", "minor": "3", "capacity": 6}],
        "profiles": {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"},
    }
    return FakeNode({"enflame.com/gcu-drs-capacity": json.dumps(capacity)})


def _enflame_expected(node: str) -> dict[str, str]:
    # 16 GB asked: the 3g.20gb profile, 3 of the 6 slices (50 of the cores)
    return {
        "hami.io/enflame-vgpu-devices-allocated": f"{node}-enflame-drs-0,Enflame,20480,50:;",
        "assigned-containers": '{"c0":{"allocated":false,"request":3,"profileID":"1","profileName":"3g.20gb"}}',
        "enflame.com/gcu-assigned": "false",
        "enflame.com/gcu-request-size": "3",
        "enflame.com/gcu-assigned-index": "0",
        "enflame.com/gcu-assigned-minor": "3",
    }


def _neuron_node(name: str) -> FakeNode:
    # four Inferentia2 devices of two cores each, the instance type telling the cores per device
    return FakeNode(
        {},
        {"aws.amazon.com/neuron": 4, "aws.amazon.com/neuroncore": 8},
        {"node.kubernetes.io/instance-type": "inf2.24xlarge"},
    )


def _neuron_expected(node: str) -> dict[str, str]:
    return {
        "hami.io/aws-neuron-devices-allocated": f"{node}-AWSNeuron-0,AWSNeuron,0,3:;",  # core mask 0b11
        "AWS_NEURON_IDS": "0",
        "NEURON_ALLOCATED": "false",
        "aws.amazon.com/predicate-node": node,
    }


def _registration(devices: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(list(devices), separators=(",", ":"))


def _amd_node(name: str) -> FakeNode:
    mi300x = {"id": f"{name}-amd-0", "count": 4, "devmem": 196608, "devcore": 304, "type": "AMD Instinct MI300X"}
    return FakeNode({"hami.io/node-amd-register": _registration([{**mi300x, "health": True}])}, {"amd.com/gpu": 2})


def _amd_expected(node: str) -> dict[str, str]:
    value = f"{node}-amd-0,AMD Instinct MI300X,8192,152:;"  # 50% of 304 compute units
    return {"hami.io/amd-devices-allocated": value, "hami.io/amd-devices-to-allocate": value}


def _biren_node(name: str) -> FakeNode:
    br = {"count": 4, "devmem": 32768, "devcore": 100, "type": "Biren BR106", "health": True}
    return FakeNode({"hami.io/node-biren-register": _registration([{"id": f"{name}-br-{i}", **br} for i in range(2)])})


def _biren_expected(node: str) -> dict[str, str]:
    value = f"{node}-br-0,Biren,0,0:;"
    return {"hami.io/Biren-devices-allocated": value, "hami.io/Biren-devices-to-allocate": value}


def _vastai_node(name: str) -> FakeNode:
    # die mode: four dies on two AIC cards
    dies = [
        {"id": f"{name}-va-{i}", "index": i, "count": 1, "devmem": 16384, "devcore": 100, "type": "VA1",
         "health": True, "custominfo": {"AIC": aic, "DeviceStrategy": "die"}}
        for i, aic in enumerate(["A", "A", "B", "B"])
    ]  # fmt: skip
    return FakeNode({"hami.io/node-va-register": _registration(dies)})


def _vastai_expected(node: str) -> dict[str, str]:
    value = f"{node}-va-0,Vastai,0,0:;"
    return {"hami.io/Vastai-devices-allocated": value, "hami.io/Vastai-devices-to-allocate": value}


FAMILY_CASES: dict[str, FamilyCase] = {
    "nvidia": FamilyCase(
        "nvidia",
        "NVIDIA",
        _nvidia_node,
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30},
        _nvidia_expected,
    ),
    "hygon": FamilyCase(
        "hygon",
        "DCU",
        _hygon_node,
        {"hygon.com/dcunum": 1, "hygon.com/dcumem": 2000, "hygon.com/dcucores": 40},
        _hygon_expected,
    ),
    "cambricon": FamilyCase(
        "cambricon",
        "MLU",
        _cambricon_node,
        {"cambricon.com/vmlu": 1, "cambricon.com/mlu.smlu.vmemory": 8, "cambricon.com/mlu.smlu.vcore": 30},
        _cambricon_expected,
    ),
    "mthreads": FamilyCase(
        "mthreads",
        "Mthreads",
        _mthreads_node,
        {"mthreads.com/vgpu": 1, "mthreads.com/sgpu-memory": 8, "mthreads.com/sgpu-core": 4},
        _mthreads_expected,
        times={PREDICATE_TIME: 10**9},
    ),
    "iluvatar": FamilyCase(
        "iluvatar",
        "MR-V100",
        _iluvatar_node,
        {"iluvatar.ai/MR-V100-vgpu": 1, "iluvatar.ai/MR-V100.vMem": 16, "iluvatar.ai/MR-V100.vCore": 50},
        _iluvatar_expected,
    ),
    "metax-sgpu": FamilyCase(
        "metax",
        "Metax-SGPU",
        _metax_node,
        {"metax-tech.com/sgpu": 1, "metax-tech.com/vcore": 30, "metax-tech.com/vmemory": 8},
        _metax_expected,
        pod_annotations={"metax-tech.com/sgpu-qos-policy": "fixed-share"},
        times={"metax-tech.com/predicate-time": 10**9},
    ),
    "ascend": FamilyCase(
        "ascend",
        ASCEND,
        _ascend_node,
        {f"huawei.com/{ASCEND}": 1, f"huawei.com/{ASCEND}-memory": 16000},
        _ascend_expected,
        times={"predicate-time": 1},
    ),
    "kunlun-vxpu": FamilyCase(
        "kunlun",
        "XPU",
        _kunlun_node,
        {"kunlunxin.com/vxpu": 1, "kunlunxin.com/vxpu-memory": 20000},
        _kunlun_expected,
    ),
    "kunlun-xpu": FamilyCase("kunlun", "kunlun", _kunlun_xpu_node, {"kunlunxin.com/xpu": 1}, _kunlun_xpu_expected),
    "metax-gpu": FamilyCase(
        "metax", "Metax-GPU", _metax_gpu_node, {"metax-tech.com/gpu": 1}, _metax_gpu_expected, one_container=True
    ),
    "enflame-drs": FamilyCase(
        "enflame",
        "Enflame",
        _enflame_node,
        {"enflame.com/gcu-memory": 16},
        _enflame_expected,
        times={"enflame.com/gcu-assigned-time": 10**9},
    ),
    "awsneuron": FamilyCase(
        "awsneuron",
        "AWSNeuron",
        _neuron_node,
        {"aws.amazon.com/neuron": 1},
        _neuron_expected,
        times={"NEURON_ALLOC_TIME": 10**9},
    ),
    "amd": FamilyCase(
        "amd",
        "AMD",
        _amd_node,
        {"amd.com/gpu": 1, "amd.com/gpumem": 8192, "amd.com/gpucores": 50},
        _amd_expected,
    ),
    "biren": FamilyCase("biren", "Biren", _biren_node, {"birentech.com/gpu": 1}, _biren_expected),
    "vastai": FamilyCase("vastai", "Vastai", _vastai_node, {"vastaitech.com/va": 1}, _vastai_expected),
}
"""One case per family (per vendor where a family has several) with an end-to-end test; a family adds its case here
(and nothing else). Enflame's whole GCUs have none: which of two idle cards HAMi takes is left open."""


def family_flags(families: Sequence[str]) -> list[str]:
    """``hami scheduler`` switches the families need (HAMi's ``--enable-ascend``/``--enable-iluvatar``)."""
    return [f"--{GATED_FAMILIES[f].replace('_', '-')}" for f in families if f in GATED_FAMILIES]


@dataclass
class VendorStack:
    """One test's cluster: its namespace, labelled fake nodes, hami, kube-scheduler and the lock releaser."""

    plane: ControlPlane
    kube: KubeClient
    namespace: str
    hami: HamiScheduler
    vendors: Mapping[str, Vendor]
    make_node: Callable[..., dict[str, Any]]
    plugin: FakeDevicePlugin | None = None

    @property
    def label(self) -> dict[str, str]:
        return {"hami-e2e/run": self.namespace}

    def node(self, name: str, *cases: FamilyCase) -> str:
        """A fake node (name prefixed with the namespace) holding the devices of every case; returns its name."""
        full = f"{self.namespace}-{name}"
        annotations: dict[str, str] = {}
        capacity: dict[str, int | str] = {}
        labels = self.label
        for case in cases:
            fake = case.node(full)
            annotations |= fake.annotations
            capacity |= fake.capacity
            labels |= fake.labels
        self.make_node(full, extended=capacity, labels=labels, annotations=annotations)
        return full

    def pod(
        self, name: str, containers: Sequence[Mapping[str, int | str]], annotations: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """A pod with one container per limits map, admitted by hami's own admission decision, then created."""
        raw: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace, "annotations": dict(annotations or {})},
            "spec": {
                "containers": [
                    {"name": f"c{i}", "image": IMAGE, "resources": {"limits": {k: str(v) for k, v in limits.items()}}}
                    for i, limits in enumerate(containers)
                ],
                "nodeSelector": self.label,
                "terminationGracePeriodSeconds": 0,
            },
        }
        admission = Admission(
            self.vendors, admitters_for(self.vendors), SchedulingDefaults(), AdmissionSettings(SCHEDULER_NAME)
        )
        answer = admit_pod(admission, raw, self.namespace)
        assert isinstance(answer, Admitted), f"hami's admission refused the pod: {answer}"
        created: dict[str, Any] = self.kube.post(
            f"/api/v1/namespaces/{self.namespace}/pods", apply_patch(raw, answer.patch)
        )
        return created

    def bound(self, name: str) -> dict[str, Any]:
        return self.kube.wait_for_pod_scheduled(self.namespace, name)

    def allocations(self, pod: Mapping[str, Any]) -> dict[str, PodDevices]:
        """Each vendor's allocation on the pod, decoded by the vendor's own codec."""
        annotations = pod["metadata"].get("annotations") or {}
        return {
            name: v.decode(annotations[v.keys.allocated], v.keys.allocated)
            for name, v in self.vendors.items()
            if v.keys.allocated in annotations
        }

    def node_annotations(self, node: str) -> dict[str, str]:
        found: dict[str, str] = self.kube.get(f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {}
        return found

    def lock_released(self, node: str, pod: str) -> bool:
        """Whether the stand-in released the node's lock for the pod (the pod is then ``bind-phase: success``)."""
        assert self.plugin is not None
        return (node, f"{self.namespace}/{pod}") in self.plugin.released


VendorStackFactory = Callable[..., VendorStack]


def start_vendor_stack(
    plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    make_node: Callable[..., dict[str, Any]],
    start_scheduler: Callable[..., Scheduler],
    families: Sequence[str],
    flags: Sequence[str] = (),
) -> VendorStack:
    """hami with the families' switches, kube-scheduler calling it with every device-config resource managed, and a
    lock releaser for every registered vendor's node lock (fixture ``vendor_stack`` in ``conftest.py``)."""
    config = default_device_config()
    vendors = vendors_from_config(config)
    hami = HamiScheduler(plane, ["--node-lock-timeout=60s", *family_flags(families), *flags])
    stack = VendorStack(plane, kube, namespace, hami, vendors, make_node)
    hami.start()
    scheduler_config = extender_config(hami)
    (extender,) = scheduler_config["extenders"]
    extender["managedResources"] = [
        {"name": name, "ignoredByScheduler": True} for name in sorted(known_resource_names(config))
    ]
    start_scheduler(scheduler_config)
    lock_keys = sorted({v.keys.lock for v in vendors.values() if v.keys.lock})
    stack.plugin = FakeDevicePlugin(plane, f"hami-e2e/run={namespace}", lock_keys=lock_keys)
    stack.plugin.start()
    return stack


def stop_vendor_stack(stack: VendorStack) -> None:
    """Stop the releaser and hami; then check neither failed nor logged an error."""
    if stack.plugin is not None:
        stack.plugin.stop()
    stack.hami.stop()
    assert stack.plugin is None or stack.plugin.error is None, f"the lock releaser failed: {stack.plugin.error!r}"
    assert stack.hami.problems() == [], "hami logged errors"
    assert set(stack.hami.exit_codes) == {0}, "hami did not shut down cleanly on SIGTERM"
