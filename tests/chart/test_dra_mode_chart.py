"""The chart's DRA mode (``draMode``, docs/dra-mode.md): off by default (nothing changes); on, a second webhook entry
``dra.hami.io`` for the DRA namespaces which ``vgpu.hami.io`` leaves out, ``--dra-mode`` and ``--dra-device-class``
on hami, ``create``/``get`` on resourceclaims in hami's ClusterRole only then, and the DeviceClass the claims name."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.test_chart import KUBE_VERSION, container, kinds, one, render, rules, run_helm
from tests.helm import CHART

ON = "draMode.enabled=true"
CLASS = "hami-core-gpu.project-hami.io"


def entries(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {w["name"]: w for w in one(docs, "MutatingWebhookConfiguration")["webhooks"]}


def mode_selector(entry: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in entry["namespaceSelector"]["matchExpressions"] if e["key"] == "hami.io/scheduling-mode"]


def test_off_by_default_nothing_of_it_is_rendered() -> None:
    docs = render()
    assert list(entries(docs)) == ["vgpu.hami.io"]
    assert mode_selector(entries(docs)["vgpu.hami.io"]) == []
    assert not [a for a in container(docs, "hami")["args"] if a.startswith("--dra")]
    assert ("resource.k8s.io", "resourceclaims", ("create", "get"), ()) not in rules(
        one(docs, "ClusterRole", "hami-scheduler")
    )
    assert ("DeviceClass", CLASS) not in kinds(docs)


def test_on_a_second_entry_serves_the_labelled_namespaces_the_first_leaves_out() -> None:
    webhooks = entries(render(ON))
    vgpu, dra = webhooks["vgpu.hami.io"], webhooks["dra.hami.io"]
    assert list(webhooks) == ["vgpu.hami.io", "dra.hami.io"]
    assert mode_selector(vgpu) == [{"key": "hami.io/scheduling-mode", "operator": "NotIn", "values": ["dra"]}]
    assert mode_selector(dra) == [{"key": "hami.io/scheduling-mode", "operator": "In", "values": ["dra"]}]
    assert dra["clientConfig"]["service"]["path"] == "/webhook/dra"
    assert vgpu["clientConfig"]["service"]["path"] == "/webhook"
    assert dra["sideEffects"] == "None"
    same = ("failurePolicy", "timeoutSeconds", "matchConditions", "objectSelector", "rules", "reinvocationPolicy")
    for key in same:
        assert dra[key] == vgpu[key], key
    others = [e for e in dra["namespaceSelector"]["matchExpressions"] if e["key"] != "hami.io/scheduling-mode"]
    assert others == [e for e in vgpu["namespaceSelector"]["matchExpressions"] if e not in mode_selector(vgpu)]
    assert {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]} in others


def test_all_namespaces_but_those_labelled_extender() -> None:
    webhooks = entries(render(ON, "draMode.namespaces=all"))
    assert mode_selector(webhooks["vgpu.hami.io"]) == [
        {"key": "hami.io/scheduling-mode", "operator": "In", "values": ["extender"]}
    ]
    assert mode_selector(webhooks["dra.hami.io"]) == [
        {"key": "hami.io/scheduling-mode", "operator": "NotIn", "values": ["extender"]}
    ]


def test_the_mode_selector_stays_when_the_namespace_selector_is_not_managed() -> None:
    webhooks = entries(render(ON, "scheduler.admissionWebhook.manageNamespaceSelector=false"))
    assert webhooks["dra.hami.io"]["namespaceSelector"] == {
        "matchExpressions": [{"key": "hami.io/scheduling-mode", "operator": "In", "values": ["dra"]}]
    }
    assert webhooks["vgpu.hami.io"]["namespaceSelector"] == {
        "matchExpressions": [{"key": "hami.io/scheduling-mode", "operator": "NotIn", "values": ["dra"]}]
    }


def test_a_custom_url_gets_the_dra_path() -> None:
    sets = ("scheduler.admissionWebhook.customURL.enabled=true", "scheduler.admissionWebhook.customURL.path=/webhook")
    webhooks = entries(render(ON, *sets))
    assert webhooks["vgpu.hami.io"]["clientConfig"]["url"] == "https://127.0.0.1:31998/webhook"
    assert webhooks["dra.hami.io"]["clientConfig"]["url"] == "https://127.0.0.1:31998/webhook/dra"


def test_hami_runs_with_dra_mode_and_the_device_class() -> None:
    args = container(render(ON, "draMode.deviceClass=gpu-share", "draPlugin.deviceClass.create=false"), "hami")["args"]
    assert [a for a in args if a.startswith("--dra")] == ["--dra-mode", "--dra-device-class=gpu-share"]


def test_hami_may_create_and_get_claims_only_in_dra_mode() -> None:
    on = rules(one(render(ON), "ClusterRole", "hami-scheduler"))
    off = rules(one(render(), "ClusterRole", "hami-scheduler"))
    assert sorted(set(on) - set(off)) == [("resource.k8s.io", "resourceclaims", ("create", "get"), ())]


def test_the_device_class_is_made_even_with_the_plugin_off() -> None:
    docs = render(ON)
    dc = one(docs, "DeviceClass", CLASS)
    assert "device.driver == 'hami-core-gpu.project-hami.io'" in dc["spec"]["selectors"][0]["cel"]["expression"]
    assert not [k for k in kinds(docs) if k[0] == "DaemonSet" and "dra-plugin" in k[1]]
    assert ("DeviceClass", CLASS) not in kinds(render(ON, "draPlugin.deviceClass.create=false"))


def test_a_device_class_other_than_the_one_made_is_refused_naming_both() -> None:
    result = run_helm("template", "hami", str(CHART), "--kube-version", KUBE_VERSION, "--set", ON,
                      "--set", "draMode.deviceClass=gpu-share")  # fmt: skip
    assert result.returncode != 0
    assert (
        "draMode.deviceClass is gpu-share but the DeviceClass the chart creates (draPlugin.deviceClass.name) is "
        "hami-core-gpu.project-hami.io: set them equal, or set draPlugin.deviceClass.create=false" in result.stderr
    )


@pytest.mark.parametrize("value", ["some", "dra"])
def test_an_unknown_namespaces_value_is_refused_by_the_schema(value: str) -> None:
    result = run_helm("template", "hami", str(CHART), "--kube-version", KUBE_VERSION, "--set", ON,
                      "--set", f"draMode.namespaces={value}")  # fmt: skip
    assert result.returncode != 0
    assert "'/draMode/namespaces': value must be one of 'labelled', 'all'" in result.stderr


def test_dra_mode_lints_clean() -> None:
    result = run_helm("lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, "--set", ON)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dra_mode_without_the_webhook_is_refused() -> None:
    off = ("--set", "scheduler.admissionWebhook.enabled=false", "--set", "scheduler.metricsSecure=false")
    result = run_helm("template", "hami", str(CHART), "--kube-version", KUBE_VERSION, "--set", ON, *off)
    assert result.returncode != 0
    assert "draMode.enabled needs scheduler.admissionWebhook.enabled" in result.stderr
