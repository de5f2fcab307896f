"""The chart's ``scheduler.preemption``: the KubeSchedulerConfiguration's extender gets ``preemptVerb: preempt``
exactly when kube-scheduler asks hami for the victims: ``extender``, chosen; ``auto`` is the verified ``self`` on every
version, 1.38 included."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helm import CHART, helm, run_template, template

NAMESPACE = "hami-system"


def extender_entry(kube_version: str, *sets: str, values: tuple[Path, ...] = ()) -> dict[str, Any]:
    docs = template(NAMESPACE, kube_version, *sets, values=values)
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "hami-scheduler"]
    (entry,) = yaml.safe_load(configmap["data"]["config.yaml"])["extenders"]
    assert (entry["filterVerb"], entry["bindVerb"]) == ("filter", "bind")
    return dict(entry)


@pytest.mark.parametrize(
    ("kube_version", "sets", "verb"),
    [
        pytest.param("1.36.3", (), False, id="auto-on-1.36"),
        pytest.param("1.37.2", (), False, id="auto-on-1.37"),
        pytest.param("1.38.0", (), False, id="auto-on-1.38"),
        pytest.param("1.39.1", (), False, id="auto-on-1.39"),
        pytest.param("1.38.0-beta.0", (), False, id="auto-on-a-1.38-pre-release"),
        pytest.param("1.38.0", ("scheduler.preemption=auto",), False, id="auto-given"),
        pytest.param("1.38.0", ("scheduler.preemption=extender",), True, id="extender-on-1.38"),
        pytest.param("1.38.0", ("scheduler.preemption=self",), False, id="self-on-1.38"),
        pytest.param("1.36.3", ("scheduler.preemption=self",), False, id="self-on-1.36"),
        pytest.param("1.38.0", ("scheduler.preemption=off",), False, id="off-on-1.38"),
        pytest.param("1.38.0", ("scheduler.kubeScheduler.image.tag=v1.37.2",), False, id="auto-with-a-1.37-sidecar"),
        pytest.param("1.37.2", ("scheduler.kubeScheduler.image.tag=v1.38.1",), False, id="auto-with-a-1.38-sidecar"),
        pytest.param(
            "1.37.2",
            ("scheduler.kubeScheduler.image.tag=v1.38.1", "scheduler.preemption=extender"),
            True,
            id="extender-with-a-1.38-sidecar",
        ),
        pytest.param(
            "1.38.0",
            ("scheduler.kubeScheduler.image.tag=custom", "scheduler.preemption=extender"),
            True,
            id="extender-with-an-unversioned-tag",
        ),
    ],
)
def test_the_preempt_verb_is_configured_only_when_kube_scheduler_asks_for_victims(
    kube_version: str, sets: tuple[str, ...], verb: bool
) -> None:
    entry = extender_entry(kube_version, *sets)
    assert entry.get("preemptVerb") == ("preempt" if verb else None)


def test_an_unquoted_off_in_a_values_file_means_off(tmp_path: Path) -> None:
    """YAML 1.1 reads ``preemption: off`` as false; it must not fall back to auto."""
    values = tmp_path / "values.yaml"
    values.write_text("scheduler:\n  preemption: off\n")
    assert "preemptVerb" not in extender_entry("1.38.0", values=(values,))


@pytest.mark.parametrize(
    ("kube_version", "sets", "message"),
    [
        pytest.param(
            "1.36.3",
            ("scheduler.preemption=extender",),
            "scheduler.preemption: extender needs kube-scheduler 1.38 or newer, which asks the extender for the "
            "victims; this chart runs kube-scheduler v1.36.3. Use auto or self",
            id="extender-before-1.38",
        ),
    ],
)
def test_a_value_that_cannot_work_is_refused_naming_it(kube_version: str, sets: tuple[str, ...], message: str) -> None:
    result = run_template(NAMESPACE, kube_version, *sets)
    assert result.returncode != 0
    assert message in result.stderr


@pytest.mark.parametrize("value", ["sometimes", "true"])
def test_a_value_that_is_no_mode_is_refused_by_the_schema_and_the_template(value: str) -> None:
    result = run_template(NAMESPACE, "1.38.0", f"scheduler.preemption={value}")
    assert result.returncode != 0
    assert "preemption" in result.stderr  # the schema (values.schema.json) lists the modes
    assert all(mode in result.stderr for mode in ("auto", "extender", "self", "off"))
    skipped = subprocess.run(
        [helm(), "template", "hami", str(CHART), "--kube-version", "1.38.0", "--skip-schema-validation",
         "--set", f"scheduler.preemption={value}"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert f"scheduler.preemption: {value} is not one of auto, extender, self, off" in skipped.stderr


EVICTING = {"pods/eviction", "pods/status"}
BUDGETS = {"poddisruptionbudgets"}


@pytest.mark.parametrize(
    ("kube_version", "sets", "mode"),
    [
        pytest.param("1.36.3", (), "self", id="auto-on-1.36-hami-evicts"),
        pytest.param("1.38.0", (), "self", id="auto-on-1.38-hami-evicts"),
        pytest.param("1.38.0", ("scheduler.preemption=extender",), "extender", id="extender-kube-scheduler-evicts"),
        pytest.param("1.38.0", ("scheduler.preemption=self",), "self", id="self-on-1.38"),
        pytest.param("1.36.3", ("scheduler.preemption=off",), "off", id="off"),
    ],
)
def test_hami_gets_the_same_mode_the_eviction_rights_only_when_it_evicts_and_budgets_when_it_picks(
    kube_version: str, sets: tuple[str, ...], mode: str
) -> None:
    docs = template(NAMESPACE, kube_version, *sets)
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (hami,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "hami"]
    assert [a for a in hami["args"] if a.startswith("--preemption=")] == [f"--preemption={mode}"]
    (role,) = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "hami-scheduler"]
    granted = {resource for rule in role["rules"] for resource in rule["resources"]}
    assert (EVICTING & granted) == (EVICTING if mode == "self" else set())
    assert (BUDGETS & granted) == (BUDGETS if mode in ("self", "extender") else set())  # both rank by budgets
