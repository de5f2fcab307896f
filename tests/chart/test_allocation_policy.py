"""The chart's allocation policy (``templates/scheduler/allocation-policy.yaml``, docs/trust.md): the keys it guards are
the vendor registry's, the identities it lets through are hami's scheduler, the device plugin of the pod's node and
the ones the values add. (What the API server does with it: ``tests/e2e/test_trust.py``.)"""

from __future__ import annotations

import json
import re
from typing import Any

from hami.devices import allocation_keys
from hami.protocol import keys
from tests.chart.test_chart import NAMESPACE, one, render, run_helm
from tests.helm import CHART

TEMPLATE = CHART / "templates" / "scheduler" / "_allocation-keys.tpl"
POLICY = "hami-scheduler-allocations"
HAMI = f"system:serviceaccount:{NAMESPACE}:hami-scheduler"
PLUGIN = f"system:serviceaccount:{NAMESPACE}:hami-device-plugin"


def listed(define: str) -> list[str]:
    """The list a ``define`` of ``_allocation-keys.tpl`` holds."""
    found = re.search(r'define "' + re.escape(define) + r'" -}}\n(.*?)\n{{- end', TEMPLATE.read_text(), re.S)
    assert found, define
    names: list[str] = json.loads(found.group(1))
    return names


def spec(*sets: str) -> dict[str, Any]:
    policy: dict[str, Any] = one(render(*sets), "ValidatingAdmissionPolicy", POLICY)["spec"]
    return policy


def variable(policy: dict[str, Any], name: str) -> str:
    expression: str = next(v["expression"] for v in policy["variables"] if v["name"] == name)
    return expression


def test_the_guarded_keys_are_the_vendor_registrys() -> None:
    scheduler, plugin = allocation_keys()
    shown = "\n".join(f'  "{k}",' for k in scheduler) + "\n---\n" + "\n".join(f'  "{k}",' for k in plugin)
    assert (tuple(listed("hami.schedulerAllocationKeys")), tuple(listed("hami.pluginAllocationKeys"))) == (
        scheduler,
        plugin,
    ), f"{TEMPLATE} is out of date; its two lists are:\n{shown}"


def test_every_allocation_key_the_ledger_reads_is_guarded() -> None:
    scheduler, plugin = allocation_keys()
    assert {keys.VGPU_NODE, keys.NVIDIA_KEYS.allocated} <= set(scheduler)
    assert {keys.BIND_PHASE, keys.NVIDIA_KEYS.to_allocate, keys.NVIDIA_MIG_ALLOCATIONS} <= set(plugin)
    assert not set(scheduler) & set(plugin)
    assert all(k.startswith("hami.io/") for k in scheduler + plugin)


def test_the_policy_guards_pod_creates_updates_and_bindings_for_everyone_but_hami_and_administrators() -> None:
    policy = spec()
    assert policy["failurePolicy"] == "Fail"
    (rule,) = policy["matchConstraints"]["resourceRules"]
    assert (rule["operations"], rule["resources"]) == (["CREATE", "UPDATE"], ["pods", "pods/*"])
    conditions = {c["name"]: c["expression"] for c in policy["matchConditions"]}
    assert conditions["not-hamis-scheduler"] == f'!(request.userInfo.username in ["{HAMI}"])'
    assert '"system:masters" in request.userInfo.groups' in conditions["not-a-cluster-administrator"]
    assert conditions["a-pod-or-its-binding"] == 'request.kind.kind in ["Pod", "Binding"]'
    guarded = variable(policy, "changed")
    scheduler, plugin = allocation_keys()
    assert guarded.startswith(json.dumps([*scheduler, *plugin], separators=(",", ":")) + ".filter(")
    assert f'request.userInfo.username in ["{PLUGIN}"]' in variable(policy, "ownNodesPlugin")
    assert "oldObject.spec.nodeName == variables.nodeName" in variable(policy, "ownNodesPlugin")
    assert json.dumps(list(plugin), separators=(",", ":")) in variable(policy, "refused")
    binding = one(render(), "ValidatingAdmissionPolicyBinding", POLICY)["spec"]
    assert binding == {"policyName": POLICY, "validationActions": ["Deny"]}


def test_values_add_writers_and_the_policy_can_be_dropped() -> None:
    hamis = "system:serviceaccount:kube-system:hami-scheduler"
    vendor = "system:serviceaccount:kube-system:vendor-plugin"
    policy = spec(
        f"scheduler.allocationPolicy.schedulers[0]={hamis}", f"scheduler.allocationPolicy.devicePlugins[0]={vendor}"
    )
    conditions = {c["name"]: c["expression"] for c in policy["matchConditions"]}
    assert conditions["not-hamis-scheduler"] == f'!(request.userInfo.username in ["{HAMI}","{hamis}"])'
    assert f'["{PLUGIN}","{vendor}"]' in variable(policy, "ownNodesPlugin")
    no_plugin = spec("devicePlugin.enabled=false")
    assert "request.userInfo.username in []" in variable(no_plugin, "ownNodesPlugin")
    dropped = [d for d in render("scheduler.allocationPolicy.enabled=false") if d["metadata"]["name"] == POLICY]
    assert dropped == []


def test_the_policy_needs_kubernetes_1_30_or_an_explicit_opt_out() -> None:
    sets = ["--set", "devicePlugin.nodeRestriction=false"]
    result = run_helm("template", "hami", str(CHART), "--namespace", NAMESPACE, "--kube-version", "1.29.4", *sets)
    assert result.returncode != 0
    assert "scheduler.allocationPolicy needs Kubernetes 1.30 or newer" in result.stderr
    assert "Set scheduler.allocationPolicy.enabled=false" in result.stderr


def test_dra_modes_marks_may_change_on_an_existing_pod_by_hami_alone() -> None:
    policy = spec()
    marks = variable(policy, "draMarks")
    assert marks.startswith("!variables.podUpdate ? [] :")  # CREATE: the webhook writes them in the same request
    assert variable(policy, "podUpdate") == 'request.operation == "UPDATE" && request.kind.kind == "Pod"'
    assert f'["{keys.DRA_REQUESTS}"].filter(k,' in marks
    assert f'["{keys.DRA_LABEL}"].filter(k,' in marks
    assert "variables.newLabels[k] != variables.oldLabels[k]" in marks
    validation = next(v for v in policy["validations"] if "draMarks" in v["expression"])
    assert validation["expression"] == "size(variables.draMarks) == 0"
    assert "DRA mode creates the pod's ResourceClaims from them" in validation["messageExpression"]
