"""The pure parts of the DRA-mode benches (bench.dra, bench.drastandin, bench.run's targets): the objects they write
are the ones the contract (DRAMODE) and hami's DRA plugin define, and the figures are split and judged right."""

from __future__ import annotations

import json
import random
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from bench import dra, drastandin, e2e
from bench.e2e import audited_requests
from bench.run import DRA_TARGETS, _targets
from bench.scenarios import node_devices

from hami.deviceplugin.dra.slices import DRIVER
from tests.e2e.cluster import ApiError
from tests.unit.jsonpatch import apply_patch

ASKED = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024", "nvidia.com/gpucores": "10"}


def admitted(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` as the API server stores it after defaulting (requests = limits) and the stand-in's patch."""
    for c in pod["spec"]["containers"]:
        limits = (c.get("resources") or {}).get("limits")
        if limits:
            c["resources"]["requests"] = dict(limits)
    return apply_patch(pod, drastandin.admission_patch(pod, "hami-scheduler", random.Random(7)))


def test_each_node_publishes_the_gpus_it_registers_in_one_slice() -> None:
    body = dra.node_slice("node-00003", "uid-3", 3, 8)
    spec = body["spec"]
    assert spec["driver"] == DRIVER == dra.DEVICE_CLASS
    assert spec["nodeName"] == spec["pool"]["name"] == "node-00003"
    assert spec["pool"]["resourceSliceCount"] == 1
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-3"
    uuids = [d["attributes"]["uuid"]["string"] for d in spec["devices"]]
    assert uuids == [d.id for d in node_devices(3, 8)]
    assert {d["capacity"]["memory"]["value"] for d in spec["devices"]} == {"8Gi"}
    assert all(d["allowMultipleAllocations"] for d in spec["devices"])


def test_the_bench_claim_is_the_contract_translation_of_its_pod() -> None:
    exactly = dra.claim_request()["devices"]["requests"][0]["exactly"]
    assert exactly == {
        "deviceClassName": DRIVER,
        "allocationMode": "ExactCount",
        "count": 1,
        "capacity": {"requests": {"memory": "1024Mi", "cores": "10"}},
    }
    assert drastandin.claim_spec(ASKED) == dra.claim_request()


def test_more_than_one_gpu_asks_for_distinct_cards() -> None:
    spec = drastandin.claim_spec({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "3000"})
    assert spec["devices"]["constraints"] == [{"requests": ["gpu"], "distinctAttribute": f"{DRIVER}/uuid"}]
    assert spec["devices"]["requests"][0]["exactly"]["capacity"]["requests"] == {"memory": "3000Mi", "cores": "0"}


def test_the_stand_in_webhook_patches_as_the_contract_says() -> None:
    pod = admitted(dra.hami_pod("p0001"))
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["limits"] == {}
    assert container["resources"]["requests"] == {}
    assert container["resources"]["claims"] == [{"name": "hami-main"}]
    (entry,) = pod["spec"]["resourceClaims"]
    assert entry["name"] == "hami-main"
    assert re.fullmatch(r"p0001-main-[bcdfghjklmnpqrstvwxz2456789]{5}", entry["resourceClaimName"])
    assert pod["metadata"]["labels"] == {"hami.io/dra": "true"}
    requests = json.loads(pod["metadata"]["annotations"]["hami.io/dra-requests"])
    assert requests == {
        entry["resourceClaimName"]: {
            "container": "main",
            "section": "containers",
            "resources": ASKED,
            "annotations": {},
        }
    }
    assert pod["spec"]["schedulerName"] == "hami-scheduler"


def test_the_stand_in_keeps_what_the_pod_had_and_names_generated_pods_by_their_prefix() -> None:
    pod = dra.hami_pod("")
    pod["metadata"] = {"generateName": "job-", "labels": {"app": "x"}, "annotations": {"a": "b"}}
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "other"}]
    pod["spec"]["resourceClaims"] = [{"name": "other", "resourceClaimName": "mine"}]
    out = admitted(pod)
    assert out["metadata"]["labels"] == {"app": "x", "hami.io/dra": "true"}
    assert out["metadata"]["annotations"]["a"] == "b"
    assert out["spec"]["containers"][0]["resources"]["claims"] == [{"name": "other"}, {"name": "hami-main"}]
    assert out["spec"]["resourceClaims"][0] == {"name": "other", "resourceClaimName": "mine"}
    assert out["spec"]["resourceClaims"][1]["resourceClaimName"].startswith("job-main-")


def test_a_pod_without_gpus_is_not_patched() -> None:
    pod = dra.hami_pod("plain")
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    assert drastandin.admission_patch(pod, "hami-scheduler", random.Random(1)) == []


def test_the_stand_in_controller_creates_one_claim_owned_by_the_pod() -> None:
    pod = admitted(dra.hami_pod("p0002"))
    pod["metadata"] |= {"uid": "u-2", "namespace": "ns"}
    (claim,) = drastandin.claims_of(pod)
    assert claim["metadata"]["name"] == pod["spec"]["resourceClaims"][0]["resourceClaimName"]
    assert claim["metadata"]["namespace"] == "ns"
    assert claim["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "p0002",
            "uid": "u-2",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert claim["metadata"]["labels"] == {"hami.io/dra": "true"}
    assert claim["metadata"]["annotations"] == {"hami.io/dra-pod": "p0002"}
    assert claim["spec"] == dra.claim_request()


@pytest.mark.parametrize("pipeline", ["dra-templates", "dra-claims"])
def test_comparison_pods_use_their_claim_by_template_or_by_name(pipeline: str) -> None:
    stack = dra.DraStack(pipeline, scheduler=None)  # type: ignore[arg-type]
    pod = stack.pod(12, width=5)
    assert pod["metadata"]["name"] == "p00012"
    (source,) = pod["spec"]["resourceClaims"]
    expected = (
        {"resourceClaimTemplateName": dra.TEMPLATE_NAME}
        if pipeline == "dra-templates"
        else {"resourceClaimName": "c00012"}
    )
    assert source == {"name": "gpu", **expected}
    assert pod["spec"]["containers"][0]["resources"] == {"claims": [{"name": "gpu"}]}
    assert pod["spec"]["schedulerName"] == "hami-scheduler"


CHART_CONFIG = {
    "leaderElection": {"leaderElect": True},
    "clientConnection": {"qps": 200, "burst": 400},
    "profiles": [{"schedulerName": "hami-scheduler"}],
    "extenders": [
        {
            "urlPrefix": "https://127.0.0.1:8888",
            "filterVerb": "filter",
            "bindVerb": "bind",
            "enableHTTPS": True,
            "tlsConfig": {"insecure": True},
            "managedResources": [{"name": "nvidia.com/gpu", "ignoredByScheduler": True}],
        },
        {"urlPrefix": "https://127.0.0.1:8888", "prioritizeVerb": "prioritize", "weight": 10, "ignorable": True},
    ],
}


def test_kube_scheduler_runs_the_chart_configuration_with_the_limits_asked() -> None:
    config = dra.scheduler_config(CHART_CONFIG, 4242, (200.0, 400))
    assert config["clientConnection"] == {"qps": 200.0, "burst": 400}
    assert "leaderElection" not in config
    assert config["profiles"] == [{"schedulerName": "hami-scheduler"}]
    filter_entry, prioritize_entry = config["extenders"]
    assert filter_entry == CHART_CONFIG["extenders"][0] | {"urlPrefix": "https://127.0.0.1:4242"}
    assert prioritize_entry == CHART_CONFIG["extenders"][1] | {"urlPrefix": "https://127.0.0.1:4242"}
    assert CHART_CONFIG["extenders"][0]["urlPrefix"] == "https://127.0.0.1:8888"
    alone = dra.scheduler_config(CHART_CONFIG, None, dra.KUBE_SCHEDULER_DEFAULT_LIMITS)
    assert alone == {"profiles": [{"schedulerName": "hami-scheduler"}], "clientConnection": {"qps": 50.0, "burst": 100}}


def test_requests_are_split_by_sender(tmp_path: Path) -> None:
    def line(agent: str, verb: str, resource: str, code: int = 201, sub: str = "") -> str:
        ref = {"resource": resource} | ({"subresource": sub} if sub else {})
        return json.dumps({"userAgent": agent, "verb": verb, "objectRef": ref, "responseStatus": {"code": code}})

    kcm = "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abc/resourceclaim-controller"
    log = tmp_path / "audit.log"
    log.write_text(
        "\n".join(
            [
                line(kcm, "create", "resourceclaims"),
                line(kcm, "patch", "pods", 200, "status"),
                line(drastandin.AGENT, "create", "resourceclaims"),
                line(drastandin.AGENT, "create", "resourceclaims", 409),
                line("kube-scheduler/v1.37.2", "update", "resourceclaims", 200, "status"),
            ]
        )
        + "\n"
    )
    assert audited_requests(log, 0) == {
        "kube-controller-manager": {"create resourceclaims": 1, "patch pods/status": 1},
        "hami stand-in": {"create resourceclaims": 1, "create resourceclaims 409": 1},
        "kube-scheduler": {"update resourceclaims/status": 1},
    }
    assert dra.controller_of(kcm) == "resourceclaim-controller"
    assert dra.controller_of("kube-scheduler/v1.37.2") == ""


def _runs(**rates: float) -> tuple[dict[str, dict[str, float]], dict[str, list[dict[str, Any]]]]:
    med = {name: {"pods_per_s": rate} for name, rate in rates.items()}
    return med, {name: [{"failed_attempts": 0.0}] for name in rates}


def test_dra_mode_meets_its_targets_only_against_both_pipelines() -> None:
    low, high = DRA_TARGETS
    assert (low, high) == (0.6, 1.5)
    ok = _targets(*_runs(bare=100.0, spread=40.0, dra=60.0))
    assert ok["dra"].endswith("ok")
    under_bare = _targets(*_runs(bare=100.0, spread=30.0, dra=59.0))
    assert under_bare["dra"].endswith("MISSED")
    under_spread = _targets(*_runs(bare=100.0, spread=41.0, dra=61.0))
    assert under_spread["dra"].endswith("MISSED")
    alone = _targets(*_runs(dra=61.0))
    assert alone == {"dra": "-"}


class _Refusing:
    """A client whose first ``refusals`` creates answer ``status``, then each create succeeds."""

    def __init__(self, refusals: int, status: int = 500) -> None:
        self.refusals, self.status, self.posts = refusals, status, 0

    def post(self, path: str, body: Any) -> Any:
        self.posts += 1
        if self.posts <= self.refusals:
            raise ApiError("POST", path, self.status, {"message": 'failed calling webhook "dra.hami.io": timeout'})
        return body


def test_a_create_the_webhook_could_not_answer_is_sent_again_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(e2e.time, "sleep", lambda _s: None)
    times = e2e._BoundTimes.__new__(e2e._BoundTimes)
    times.refused, times.lock = {}, threading.Lock()
    client = _Refusing(2)
    e2e.create_retrying(client, "ns", {"metadata": {"name": "p"}}, times)  # type: ignore[arg-type]
    assert client.posts == 3
    assert sum(times.refused.values()) == 2
    assert all("dra.hami.io" in why for why in times.refused)
    with pytest.raises(ApiError):
        e2e.create_retrying(_Refusing(1, 403), "ns", {}, times)  # type: ignore[arg-type]
    with pytest.raises(ApiError):
        e2e.create_retrying(_Refusing(9), "ns", {}, times, attempts=3)  # type: ignore[arg-type]
