"""The chart's KubeSchedulerConfiguration for DRA mode (issue 38): the prioritize-only extender entry that orders
nodes for DRA-mode pods by hami's policy, and kube-scheduler's own client limits."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.helm import run_template, template

NAMESPACE = "hami-system"
KUBE = "1.36.3"
DRA = ("draMode.enabled=true",)
CA = "/tls/ca.crt"


def scheduler_config(*sets: str) -> dict[str, Any]:
    docs = template(NAMESPACE, KUBE, *sets)
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "hami-scheduler"]
    config: dict[str, Any] = yaml.safe_load(configmap["data"]["config.yaml"])
    return config


def test_extender_mode_has_one_extender_entry() -> None:
    (entry,) = scheduler_config()["extenders"]
    assert entry["filterVerb"] == "filter"
    assert "prioritizeVerb" not in entry


def test_dra_mode_adds_a_prioritize_only_entry_that_manages_nothing_and_can_be_ignored() -> None:
    first, second = scheduler_config(*DRA)["extenders"]
    assert first["filterVerb"] == "filter"
    assert first["managedResources"]  # the extender path for pods that still name hami's resources
    assert second == {
        "urlPrefix": first["urlPrefix"],
        "prioritizeVerb": "prioritize",
        "weight": 10,
        "nodeCacheCapable": True,
        "ignorable": True,
        "httpTimeout": first["httpTimeout"],
        "enableHTTPS": first["enableHTTPS"],
        "tlsConfig": first["tlsConfig"],
    }


@pytest.mark.parametrize(
    ("sets", "tls"),
    [
        pytest.param(
            ("scheduler.kubeScheduler.extenderTLSInsecure=false",), {"insecure": False, "caFile": CA}, id="ca"
        ),
        # no plain-HTTP case: DRA mode needs the admission webhook (its entry dra.hami.io), whose certificate the
        # extender's TLS always uses (dra-webhook's chart refusal)
    ],
)
def test_the_prioritize_entry_shares_the_extenders_tls_settings(sets: tuple[str, ...], tls: Any) -> None:
    first, second = scheduler_config(*DRA, *sets)["extenders"]
    assert second["urlPrefix"] == first["urlPrefix"]
    assert second["enableHTTPS"] == first["enableHTTPS"] == (tls is not None)
    assert second.get("tlsConfig") == first.get("tlsConfig") == tls


def test_weight_and_switch() -> None:
    (_, second) = scheduler_config(*DRA, "draMode.prioritizeWeight=3")["extenders"]
    assert second["weight"] == 3
    assert len(scheduler_config(*DRA, "draMode.prioritize=false")["extenders"]) == 1
    assert len(scheduler_config(*DRA, "draMode.prioritize=false", "draMode.prioritize=true")["extenders"]) == 2


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_a_weight_below_one_is_refused(value: str) -> None:
    result = run_template(NAMESPACE, KUBE, *DRA, f"draMode.prioritizeWeight={value}")
    assert result.returncode != 0
    assert "prioritizeWeight" in result.stderr


def test_kube_schedulers_client_limits_are_rendered() -> None:
    assert scheduler_config()["clientConnection"] == {"qps": 200, "burst": 400}
    sets = ("scheduler.kubeScheduler.clientConnection.qps=75", "scheduler.kubeScheduler.clientConnection.burst=150")
    assert scheduler_config(*sets)["clientConnection"] == {"qps": 75, "burst": 150}
    refused = run_template(NAMESPACE, KUBE, "scheduler.kubeScheduler.clientConnection.qps=0")
    assert refused.returncode != 0
    assert "qps" in refused.stderr
