"""The chart validates itself: ``values.schema.json`` (made by ``scripts/values-schema`` from values.yaml, the rules
in that script and HAMi v2.10's values) makes ``helm template`` (and install/upgrade) refuse a typo'd key or a
value of the wrong type, naming it, while the chart's defaults, every documented choice and a values file written
for HAMi still render. Every value of values.yaml carries a comment, which becomes its description."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.helm import CHART, run_template, template

KUBE_VERSION = "1.36.3"
NAMESPACE = "hami-system"
ROOT = Path(__file__).resolve().parents[2]
HAMI_DEFAULTS = ROOT / "tests" / "data" / "hami-v2.10.0-values.yaml"
HAMI_STYLE = ROOT / "tests" / "data" / "hami-style-values.yaml"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def generator() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("values_schema", str(ROOT / "scripts" / "values-schema"))
    spec = importlib.util.spec_from_loader("values_schema", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def refusal(*sets: str, values: tuple[Path, ...] = ()) -> str:
    result = run_template(NAMESPACE, KUBE_VERSION, *sets, values=values)
    assert result.returncode != 0, f"rendered although it should be refused: {sets}"
    return result.stderr


def names(stderr: str, path: str) -> bool:
    """The schema refusal names the value: ``a.b.c`` (helm 3) or ``/a/b/c`` (helm 4)."""
    return path in stderr or "/" + path.replace(".", "/") in stderr


def test_the_committed_schema_is_what_the_generator_makes() -> None:
    assert (CHART / "values.schema.json").read_text() == generator().render(), "run scripts/values-schema"


def leaves(node: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    out = {}
    for key, schema in node.get("properties", {}).items():
        out[prefix + key] = schema
        out.update(leaves(schema, f"{prefix}{key}."))
    return out


def value_paths(values: dict[str, Any], prefix: str = "", free: frozenset[str] = frozenset()) -> list[str]:
    out = []
    for key, value in values.items():
        out.append(prefix + key)
        if isinstance(value, dict) and key not in free:
            out += value_paths(value, f"{prefix}{key}.", free)
    return out


def test_every_value_of_values_yaml_is_in_the_schema_with_its_comment() -> None:
    schema = leaves(SCHEMA)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    free = frozenset(generator().FREE_FORM)
    paths = value_paths(values, free=free)
    assert len(paths) > 200
    missing = [p for p in paths if p not in schema]
    assert missing == []
    undescribed = [p for p in paths if not schema[p].get("description")]
    assert undescribed == []


def test_a_key_without_a_comment_stops_the_generator(tmp_path: Path) -> None:
    module = generator()
    described = module.comments("# -- The answer.\nanswer: 42\nquestion: ''\n")
    assert described == {"answer": "The answer.", "question": ""}
    with pytest.raises(module.SchemaError, match=r"question has no comment in values\.yaml"):
        module.hami_schema({"answer": 42, "question": ""}, described)


def test_every_object_refuses_keys_it_does_not_know() -> None:
    objects = [p for p, s in leaves(SCHEMA).items() if s.get("type") == "object" and "properties" in s]
    assert len(objects) > 30
    assert all(leaves(SCHEMA)[p]["additionalProperties"] is False for p in objects)
    assert SCHEMA["additionalProperties"] is False


@pytest.mark.parametrize(
    ("sets", "named"),
    [
        pytest.param(("schedulerNmae=x",), "schedulerNmae", id="typo-top-level"),
        pytest.param(("devicePlugin.deviceSplitCont=4",), "deviceSplitCont", id="typo-nested"),
        pytest.param(("devicePlugin.hamiCore.imgae=x",), "imgae", id="typo-hami-core"),
        pytest.param(("serviceMonitor.enable=true",), "enable", id="typo-monitor"),
        pytest.param(("prometheus.enabeld=true",), "enabeld", id="typo-under-a-hami-section"),
        pytest.param(("devicePlugin.deviceSplitCount=ten",), "devicePlugin.deviceSplitCount", id="a-word-for-a-number"),
        pytest.param(("scheduler.replicas=0",), "scheduler.replicas", id="no-replicas"),
        pytest.param(("kubeVersionCheck=maybe",), "kubeVersionCheck", id="not-a-choice"),
        pytest.param(
            ("scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy=spred",),
            "scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy",
            id="a-policy-typo",
        ),
        pytest.param(
            ("scheduler.defaultSchedulerPolicy.nodeSchedulerPolicy=topology-aware",),
            "scheduler.defaultSchedulerPolicy.nodeSchedulerPolicy",
            id="a-gpu-policy-for-nodes",
        ),
        pytest.param(("devicePlugin.hamiCore.ifMissing=ignore",), "devicePlugin.hamiCore.ifMissing", id="if-missing"),
        pytest.param(("scheduler.nodeLockExpire=5 minutes",), "scheduler.nodeLockExpire", id="not-a-duration"),
        pytest.param(("scheduler.service.type=Internal",), "scheduler.service.type", id="service-type"),
        pytest.param(("devicePlugin.tolerations=none",), "devicePlugin.tolerations", id="a-string-for-a-list"),
        pytest.param(("scheduler.preemption=sometimes",), "scheduler.preemption", id="preemption-choice"),
    ],
)
def test_a_typo_or_a_wrong_type_is_refused_by_the_schema_naming_it(sets: tuple[str, ...], named: str) -> None:
    stderr = refusal(*sets)
    assert "schema" in stderr
    assert names(stderr, named), stderr


def test_a_boolean_in_hamis_spelling_passes_and_a_word_that_is_none_is_refused_naming_it() -> None:
    assert template(NAMESPACE, KUBE_VERSION, "scheduler.overwriteEnv=on")
    assert "devicePlugin.enabled: maybe is not a boolean: write true or false" in refusal("devicePlugin.enabled=maybe")


@pytest.mark.parametrize(
    "sets",
    [
        pytest.param((), id="defaults"),
        pytest.param(("scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy=topology-aware\\,binpack",), id="chain"),
        pytest.param(("scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy=numa\\, binpack",), id="chain-spaced"),
        pytest.param(("devicePlugin.enabled=false",), id="a-boolean"),
        pytest.param(("scheduler.overwriteEnv=on",), id="hamis-boolean-word"),
        pytest.param(("scheduler.service.type=NodePort", "scheduler.service.httpNodePort=31998"), id="node-port"),
        pytest.param(("devicePlugin.hamiCore.image=", "devicePlugin.hamiCore.ifMissing=share"), id="no-hami-core"),
        pytest.param(("scheduler.preemption=self",), id="preemption"),
        pytest.param(("devicePlugin.nvidiaDriverRoot=/run/nvidia/driver",), id="a-null-default-given"),
        pytest.param(("serviceMonitor.enabled=true", "serviceMonitor.labels.release=kps"), id="service-monitor"),
        pytest.param(("devicePlugin.deviceListStrategy=cdi-cri\\,envvar",), id="strategies"),
    ],
)
def test_documented_values_render(sets: tuple[str, ...]) -> None:
    assert template(NAMESPACE, KUBE_VERSION, *sets)


def test_a_values_file_written_for_hami_passes_the_schema() -> None:
    assert template(NAMESPACE, KUBE_VERSION, values=(HAMI_DEFAULTS, HAMI_STYLE))


def test_a_hami_key_hami_lacks_is_described_with_what_it_becomes() -> None:
    schema = leaves(SCHEMA)
    assert schema["prometheus.enabled"]["description"] == "HAMi's name for `serviceMonitor.enabled` (the same setting)."
    assert schema["scheduler.extenderHTTPTimeout"]["description"] == (
        "HAMi's name for `scheduler.kubeScheduler.extenderHTTPTimeout` (the same setting)."
    )
    assert schema["legacyMetrics"]["description"].startswith("HAMi's key; refused unless left at HAMi's default: ")
    assert schema["devicePlugin.monitor.resyncInterval"]["description"] == (
        "HAMi's key; no effect: hami's monitor refreshes every 5 s (the install notes list it)."
    )
