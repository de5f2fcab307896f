"""The chart's ServiceMonitors and the scraper's identity for secure metrics, accepted by the real kube-apiserver:
prometheus-operator's CRD is not part of the test cluster, so a stand-in CRD with the fields the chart sets, typed as
prometheus-operator types them (``tests/data/servicemonitor-crd.yaml``), is applied for the test and removed after;
every object the chart renders with ``serviceMonitor.enabled`` then passes a server-side dry-run with strict field
validation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import ApiError, KubeClient, wait_until
from tests.e2e.test_chart import PATHS, dry_run
from tests.helm import template

CRD = yaml.safe_load((Path(__file__).resolve().parents[1] / "data" / "servicemonitor-crd.yaml").read_text())
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@pytest.fixture(scope="module")
def service_monitor_crd(kube: KubeClient) -> Iterator[None]:
    name = CRD["metadata"]["name"]
    kube.post(CRDS, CRD)
    try:

        def established() -> bool:
            conditions = (kube.get(f"{CRDS}/{name}").get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        wait_until(established, description="the ServiceMonitor CRD established")
        yield
    finally:
        kube.request("DELETE", f"{CRDS}/{name}")


@pytest.mark.parametrize("secure", [True, False], ids=["secure metrics", "plain metrics"])
def test_service_monitors_and_the_scraper_identity_pass_server_side_dry_run(
    kube: KubeClient, namespace: str, service_monitor_crd: None, secure: bool
) -> None:
    version = kube.get("/version")["gitVersion"].lstrip("v").split("-")[0]
    sets = ["serviceMonitor.enabled=true", "serviceMonitor.labels.release=kps", f"scheduler.metricsSecure={secure}"]
    if not secure:
        sets.append("scheduler.admissionWebhook.enabled=false")  # the TLS Secret comes with the webhook
    docs = template(namespace, version, *sets)
    monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert len(monitors) == 2
    for monitor in monitors:
        dry_run_monitor(kube, namespace, monitor)
    identity = [d for d in docs if "metrics-scraper" in d["metadata"]["name"]]
    assert sorted(d["kind"] for d in identity) == (["ClusterRoleBinding", "Secret", "ServiceAccount"] if secure else [])
    for obj in identity:
        assert obj["kind"] in PATHS
        dry_run(kube, namespace, obj)
    # a field the CRD does not have is refused: the check above is not vacuous
    bad = {**monitors[0], "spec": {**monitors[0]["spec"]}}
    bad["spec"]["endpoints"] = [{**bad["spec"]["endpoints"][0], "bearerTokenSecrett": {}}]
    with pytest.raises(ApiError):
        dry_run_monitor(kube, namespace, bad)


def dry_run_monitor(kube: KubeClient, namespace: str, monitor: dict[str, Any]) -> None:
    assert monitor["metadata"]["namespace"] == namespace  # the release namespace, where its token Secret is
    kube.request(
        "POST",
        f"/apis/monitoring.coreos.com/v1/namespaces/{namespace}/servicemonitors",
        monitor,
        params={"dryRun": "All", "fieldValidation": "Strict"},
    )
