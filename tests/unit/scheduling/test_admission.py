"""The admission decision table (webhook-bind-plugin-vendors.md §1.2-§1.4, scheduler-core.md §3.3, Appendix A).

Each case states a behaviour, gives a raw pod and asserts the whole verdict: allowed or denied, the message,
and the exact JSON-patch operations — then applies the patch to the pod and checks the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from hami.config import default_device_config
from hami.devices import vendors_from_config
from hami.devices.nvidia.admission import NvidiaAdmission, NvidiaAdmitter
from hami.errors import InvalidInput
from hami.protocol.objects import ObjectMeta, ResourceQuota, ResourceQuotaSpec
from hami.scheduling.admission import Admission, AdmissionSettings, Verdict, admitters_for
from hami.scheduling.quota import QuotaBook
from hami.scheduling.request import SchedulingDefaults
from tests.unit.jsonpatch import apply_patch

GPU = "nvidia.com/gpu"
MEM = "nvidia.com/gpumem"
PCT = "nvidia.com/gpumem-percentage"
CORES = "nvidia.com/gpucores"
PRIO = "nvidia.com/priority"
DCU = "hygon.com/dcunum"
DCU_CORES = "hygon.com/dcucores"


def ctr(
    name: str = "main",
    limits: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    env: list[dict[str, Any]] | None = None,
    privileged: bool | None = None,
    sidecar: bool = False,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox"}
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    if limits is not None or requests is not None:
        c["resources"] = resources
    if env is not None:
        c["env"] = env
    if privileged is not None:
        c["securityContext"] = {"privileged": privileged}
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def pod(
    *containers: dict[str, Any],
    init: tuple[dict[str, Any], ...] = (),
    scheduler: str | None = "default-scheduler",
    node: str | None = None,
    runtime_class: str | None = None,
    namespace: str = "team",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if node is not None:
        spec["nodeName"] = node
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": namespace}, "spec": spec}


def add(path: str, value: Any) -> dict[str, Any]:
    return {"op": "add", "path": path, "value": value}


def replace(path: str, value: Any) -> dict[str, Any]:
    return {"op": "replace", "path": path, "value": value}


TO_HAMI = replace("/spec/schedulerName", "hami-scheduler")
C0 = "/spec/containers/0"
C1 = "/spec/containers/1"


@dataclass
class Setup:
    nvidia: NvidiaAdmission = field(default_factory=NvidiaAdmission)
    scheduler_name: str = "hami-scheduler"
    force: bool = True
    quotas: list[ResourceQuota] = field(default_factory=list)
    used: dict[str, int] = field(default_factory=dict)

    def admission(self) -> Admission:
        vendors = vendors_from_config(default_device_config())
        admitters = admitters_for(vendors)
        admitters["NVIDIA"] = NvidiaAdmitter(self.nvidia)
        book = QuotaBook([MEM, CORES, "hygon.com/dcumem", DCU_CORES])
        for q in self.quotas:
            book.upsert(q)
        if self.used:
            book.add_usage("team", self.used)
        return Admission(
            vendors=vendors,
            admitters=admitters,
            defaults=SchedulingDefaults(),
            settings=AdmissionSettings(self.scheduler_name, self.force),
            quotas=book,
            quota_factors={MEM: 1},
        )


def quota(hard: dict[str, str]) -> ResourceQuota:
    return ResourceQuota(
        metadata=ObjectMeta(name="q", namespace="team"),
        spec=ResourceQuotaSpec(hard={f"limits.{k}": v for k, v in hard.items()}),
    )


@dataclass
class Case:
    id: str
    pod: dict[str, Any]
    ops: list[dict[str, Any]] = field(default_factory=list)
    allowed: bool = True
    message: str = ""
    setup: Setup = field(default_factory=Setup)


CASES = [
    # --- the scheduler-name gate (§1.2 step 3) ---------------------------------------------------
    Case(
        "a pod already assigned to another scheduler is allowed unchanged",
        pod(ctr(limits={GPU: "1"}), scheduler="volcano"),
        message="pod already has different scheduler assigned",
    ),
    Case(
        "default-scheduler is taken over while force-overwrite is on",
        pod(ctr(limits={GPU: "1", CORES: "30"})),
        ops=[TO_HAMI],
    ),
    Case(
        "default-scheduler is left alone when force-overwrite is off",
        pod(ctr(limits={GPU: "1"})),
        message="pod already has different scheduler assigned",
        setup=Setup(force=False),
    ),
    Case(
        "a pod without schedulerName gets ours with an add",
        pod(ctr(limits={GPU: "1", CORES: "30"}), scheduler=None),
        ops=[add("/spec/schedulerName", "hami-scheduler")],
    ),
    Case(
        "a pod already naming our scheduler needs no rename",
        pod(ctr(limits={GPU: "1", CORES: "30"}), scheduler="hami-scheduler"),
    ),
    Case(
        "with no scheduler name configured nothing is renamed and nodeName is not checked",
        pod(ctr(limits={GPU: "1"}), scheduler=None, node="n1"),
        ops=[add(f"{C0}/resources/limits/nvidia.com~1gpucores", "100")],
        setup=Setup(scheduler_name=""),
    ),
    # --- NVIDIA defaults (§3.3) -----------------------------------------------------------------
    Case(
        "a whole GPU (count only) becomes exclusive: gpucores 100",
        pod(ctr(limits={GPU: "1"})),
        ops=[add(f"{C0}/resources/limits/nvidia.com~1gpucores", "100"), TO_HAMI],
    ),
    Case(
        "memory without a count gets the default count of 1 and stays shareable",
        pod(ctr(limits={MEM: "2000"})),
        ops=[add(f"{C0}/resources/limits/nvidia.com~1gpu", "1"), TO_HAMI],
    ),
    Case(
        "cores without a count get the default count; no exclusive default over explicit cores",
        pod(ctr(limits={CORES: "50"})),
        ops=[add(f"{C0}/resources/limits/nvidia.com~1gpu", "1"), TO_HAMI],
    ),
    Case(
        "a count only in requests is copied into limits instead of defaultGPUNum",
        pod(ctr(limits={MEM: "1000"}, requests={GPU: "2"})),
        ops=[add(f"{C0}/resources/limits/nvidia.com~1gpu", "2"), TO_HAMI],
    ),
    Case(
        "no default count when defaultGPUNum is 0: the pod asks for nothing",
        pod(ctr(limits={MEM: "2000"})),
        setup=Setup(nvidia=NvidiaAdmission(default_gpu_num=0)),
    ),
    Case(
        "a full memory percentage is exclusive too",
        pod(ctr(limits={GPU: "1", PCT: "100"})),
        ops=[add(f"{C0}/resources/limits/nvidia.com~1gpucores", "100"), TO_HAMI],
    ),
    Case(
        "a partial memory percentage stays shareable",
        pod(ctr(limits={GPU: "1", PCT: "50"})),
        ops=[TO_HAMI],
    ),
    Case(
        "a count only in requests still gets the exclusive default, creating limits",
        pod(ctr(requests={GPU: "1"})),
        ops=[add(f"{C0}/resources/limits", {CORES: "100"}), TO_HAMI],
    ),
    Case(
        "priority in limits becomes CUDA_TASK_PRIORITY, creating env",
        pod(ctr(limits={GPU: "1", CORES: "20", PRIO: "1"})),
        ops=[add(f"{C0}/env", [{"name": "CUDA_TASK_PRIORITY", "value": "1"}]), TO_HAMI],
    ),
    Case(
        "priority is appended to an existing env",
        pod(ctr(limits={GPU: "1", CORES: "20", PRIO: "0"}, env=[{"name": "A", "value": "x"}])),
        ops=[add(f"{C0}/env/-", {"name": "CUDA_TASK_PRIORITY", "value": "0"}), TO_HAMI],
    ),
    Case(
        "gpuCorePolicy force reaches GPU containers only",
        pod(ctr(limits={GPU: "1", CORES: "20"}), ctr("side")),
        ops=[add(f"{C0}/env", [{"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"}]), TO_HAMI],
        setup=Setup(nvidia=NvidiaAdmission(gpu_core_policy="force")),
    ),
    Case(
        "overwriteEnv hides GPUs from the containers without one",
        pod(ctr(limits={GPU: "1", CORES: "20"}), ctr("side", env=[{"name": "A", "value": "x"}])),
        ops=[add(f"{C1}/env/-", {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}), TO_HAMI],
        setup=Setup(nvidia=NvidiaAdmission(overwrite_env=True)),
    ),
    Case(
        "overwriteEnv replaces a variable the user set, instead of appending a duplicate",
        pod(ctr(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])),
        ops=[replace(f"{C0}/env/0", {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"})],
        setup=Setup(nvidia=NvidiaAdmission(overwrite_env=True)),
    ),
    Case(
        "a second admission of a mutated pod changes nothing (idempotent env)",
        pod(
            ctr(limits={GPU: "1", CORES: "100"}, env=[{"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"}]),
            scheduler="hami-scheduler",
        ),
        setup=Setup(nvidia=NvidiaAdmission(gpu_core_policy="force")),
    ),
    Case(
        "runtimeClassName is set for a GPU pod without one",
        pod(ctr(limits={GPU: "1", CORES: "20"})),
        ops=[add("/spec/runtimeClassName", "nvidia"), TO_HAMI],
        setup=Setup(nvidia=NvidiaAdmission(runtime_class_name="nvidia")),
    ),
    Case(
        "a runtimeClassName the pod already has is kept",
        pod(ctr(limits={GPU: "1", CORES: "20"}), runtime_class="kata"),
        ops=[TO_HAMI],
        setup=Setup(nvidia=NvidiaAdmission(runtime_class_name="nvidia")),
    ),
    Case(
        "init containers are mutated under /spec/initContainers",
        pod(ctr("app"), init=(ctr("warmup", limits={GPU: "1"}),)),
        ops=[add("/spec/initContainers/0/resources/limits/nvidia.com~1gpucores", "100"), TO_HAMI],
    ),
    # --- pods without hami resources -------------------------------------------------------------
    Case("a pod without device requests is allowed untouched", pod(ctr(limits={"cpu": "1"}), ctr("b"))),
    Case(
        "a pod without device requests only gets the overwriteEnv variable",
        pod(ctr(limits={"cpu": "1"})),
        ops=[add(f"{C0}/env", [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}])],
        setup=Setup(nvidia=NvidiaAdmission(overwrite_env=True, gpu_core_policy="disable")),
    ),
    # --- privileged containers (deliberate difference: skipped, not denied) ----------------------
    Case(
        "a privileged GPU container is left unmutated but the pod still goes to hami",
        pod(ctr("priv", limits={GPU: "1"}, privileged=True), ctr("app", limits={GPU: "1"})),
        ops=[add(f"{C1}/resources/limits/nvidia.com~1gpucores", "100"), TO_HAMI],
    ),
    Case(
        "a privileged sidecar next to a GPU container does not deny the pod",
        pod(ctr("app", limits={GPU: "1", CORES: "10"}), ctr("agent", privileged=True)),
        ops=[TO_HAMI],
        setup=Setup(nvidia=NvidiaAdmission(overwrite_env=True)),
    ),
    Case(
        "privileged: false is not privileged",
        pod(ctr(limits={GPU: "1"}, privileged=False)),
        ops=[add(f"{C0}/resources/limits/nvidia.com~1gpucores", "100"), TO_HAMI],
    ),
    # --- other vendors ---------------------------------------------------------------------------
    Case(
        "a Hygon DCU pod goes to hami; NVIDIA's overwriteEnv hides NVIDIA GPUs from it",
        pod(ctr(limits={DCU: "1"})),
        ops=[add(f"{C0}/env", [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]), TO_HAMI],
        setup=Setup(nvidia=NvidiaAdmission(overwrite_env=True)),
    ),
    # --- denials -----------------------------------------------------------------------------------
    Case("a pod without containers is denied", pod(), allowed=False, message="pod has no containers"),
    Case(
        "a pod with nodeName that asks for GPUs is denied, naming the container and the resource",
        pod(ctr("train", limits={GPU: "1"}), node="node-a"),
        allowed=False,
        message="pod has node assigned: spec.nodeName is 'node-a' but containers[0](train) asks for nvidia.com/gpu; "
        "remove nodeName so that hami-scheduler chooses the node and its devices",
    ),
    Case(
        "a memory percentage above 100 is denied",
        pod(ctr("train", limits={GPU: "1", PCT: "150"})),
        allowed=False,
        message="containers[0](train).limits[nvidia.com/gpumem-percentage]: must be an integer between 0 and 100 "
        "(got '150')",
    ),
    Case(
        "a negative memory percentage is denied",
        pod(ctr("train", requests={GPU: "1", PCT: "-1"})),
        allowed=False,
        message="containers[0](train).requests[nvidia.com/gpumem-percentage]: must be an integer between 0 and 100 "
        "(got '-1')",
    ),
    Case(
        "a fractional memory percentage is denied",
        pod(ctr("train", limits={GPU: "1", PCT: "12.5"})),
        allowed=False,
        message="containers[0](train).limits[nvidia.com/gpumem-percentage]: must be an integer between 0 and 100 "
        "(got '12.5')",
    ),
    Case(
        "a percentage is validated even in an init container",
        pod(ctr("app"), init=(ctr("warm", limits={GPU: "1", PCT: "101"}),)),
        allowed=False,
        message="initContainers[0](warm).limits[nvidia.com/gpumem-percentage]: must be an integer between 0 and 100 "
        "(got '101')",
    ),
    Case(
        "a priority that is not a number is denied",
        pod(ctr("train", limits={GPU: "1", PRIO: "high"})),
        allowed=False,
        message="containers[0](train).limits[nvidia.com/priority]: must be a whole number (got 'high')",
    ),
    Case(
        "a negative DCU count is denied with the vendor parser's message",
        pod(ctr("train", limits={DCU: "-1"})),
        allowed=False,
        message="containers[0](train).limits[hygon.com/dcunum]: must not be negative (got '-1')",
    ),
    Case(
        "DCU cores above 100 are denied",
        pod(ctr("train", limits={DCU: "1", DCU_CORES: "150"})),
        allowed=False,
        message="containers[0](train).limits[hygon.com/dcucores]: cores are a percentage of one DCU and cannot "
        "exceed 100 (got '150')",
    ),
    Case(
        "an invalid request in a privileged container is still refused",
        pod(ctr("priv", limits={DCU: "-2"}, privileged=True)),
        allowed=False,
        message="containers[0](priv).limits[hygon.com/dcunum]: must not be negative (got '-2')",
    ),
    # --- quota pre-check (§1.4) ------------------------------------------------------------------
    Case(
        "a pod over its namespace's GPU memory quota is denied",
        pod(ctr(limits={GPU: "2", MEM: "3000"})),
        allowed=False,
        message="exceeding resource quota: namespace team has 0 of nvidia.com/gpumem in use, the pod asks for "
        "6000 more, the limit is 5000",
        setup=Setup(quotas=[quota({MEM: "5000"})]),
    ),
    Case(
        "usage already recorded counts against the quota",
        pod(ctr(limits={GPU: "1", MEM: "1000", CORES: "10"})),
        allowed=False,
        message="exceeding resource quota: namespace team has 95 of nvidia.com/gpucores in use, the pod asks for "
        "10 more, the limit is 100",
        setup=Setup(quotas=[quota({CORES: "100"})], used={CORES: 95}),
    ),
    Case(
        "a pod within its quota is allowed; the largest init container and the sum of app containers count",
        pod(
            ctr("a", limits={GPU: "1", MEM: "2000", CORES: "10"}),
            ctr("b", limits={GPU: "1", MEM: "2000", CORES: "10"}),
            init=(ctr("i", limits={GPU: "1", MEM: "4000", CORES: "10"}),),
        ),
        ops=[TO_HAMI],
        setup=Setup(quotas=[quota({MEM: "4000"})]),
    ),
    Case(
        "the exclusive default's 100 cores count against a cores quota",
        pod(ctr(limits={GPU: "1"})),
        allowed=False,
        message="exceeding resource quota: namespace team has 0 of nvidia.com/gpucores in use, the pod asks for "
        "100 more, the limit is 50",
        setup=Setup(quotas=[quota({CORES: "50"})]),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_decision(case: Case) -> None:
    verdict = case.setup.admission().review(case.pod, "team")
    assert verdict == Verdict(case.allowed, case.message, tuple(case.ops))
    # the patch applies to the incoming pod and touches nothing else
    patched = apply_patch(case.pod, list(verdict.patch))
    if not case.ops:
        assert patched == case.pod


@pytest.mark.parametrize(
    ("limits", "resource"),
    [
        pytest.param({GPU: "-1"}, GPU, id="a negative GPU count is denied"),
        pytest.param({GPU: "1.5"}, GPU, id="a fractional GPU count is denied"),
        pytest.param({GPU: "1", CORES: "150"}, CORES, id="gpucores above 100 are denied"),
        pytest.param({GPU: "1", MEM: "-5"}, MEM, id="negative gpumem is denied"),
    ],
)
def test_invalid_nvidia_quantities_are_denied(limits: dict[str, str], resource: str) -> None:
    verdict = Setup().admission().review(pod(ctr("train", limits=limits)), "team")
    assert not verdict.allowed
    assert verdict.message.startswith(f"containers[0](train).limits[{resource}]: ")


def test_a_pod_that_is_not_a_pod_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="not a pod"):
        Setup().admission().review({"spec": {"containers": "nope"}}, "team")


def test_the_namespace_of_the_review_wins_over_the_pods() -> None:
    setup = Setup(quotas=[quota({MEM: "100"})])
    p = pod(ctr(limits={GPU: "1", MEM: "1000"}), namespace="")
    assert not setup.admission().review(p, "team").allowed
    assert setup.admission().review(p, "elsewhere").allowed


def test_sidecar_demand_adds_to_the_app_containers() -> None:
    setup = Setup(quotas=[quota({MEM: "2500"})])
    p = pod(
        ctr("app", limits={GPU: "1", MEM: "1500"}),
        init=(ctr("sidecar", limits={GPU: "1", MEM: "1500"}, sidecar=True),),
    )
    verdict = setup.admission().review(p, "team")
    assert not verdict.allowed
    assert "the pod asks for 3000 more" in verdict.message
