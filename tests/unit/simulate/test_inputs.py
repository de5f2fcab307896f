"""``hami simulate`` reads what users have (issue 36): standard input, ``-f``, what ``helm template`` prints
(Services and ConfigMaps skipped with a note), ``--strict`` for CI, ``--demo`` with pod files, ``-o yaml``, and a
did-you-mean on every choice flag; bad input (an empty or a binary file) fails with a message naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hami.cli import app
from tests.unit.simulate.helpers import DATA, run_cli

SNAPSHOT = DATA / "fragmented.yaml"

CHART = """\
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {ports: [{port: 80}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: web-config}
data: {a: b}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: c
        image: x
        resources:
          limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 3000}
"""

TYPO = """\
apiVersion: v1
kind: Pod
metadata: {name: typo}
spec:
  containers:
  - name: c
    image: x
    resource:
      limits: {nvidia.com/gpu: 1}
"""


def _placed(stdout: str) -> list[str]:
    return [d["pod"] for d in json.loads(stdout)["decisions"] if d["status"] == "placed"]


def test_standard_input_as_helm_template_prints_it() -> None:
    result = run_cli("-s", SNAPSHOT, "-", "-o", "json", stdin=CHART)
    assert result.code == 0, result.stderr
    assert len(_placed(result.stdout)) == 2  # the Deployment's two pods
    assert result.stderr.splitlines() == [
        "note: <stdin>: document 1 (Service web): skipped, a Service makes no pod",
        "note: <stdin>: document 2 (ConfigMap web-config): skipped, a ConfigMap makes no pod",
    ]


def test_standard_input_is_read_once() -> None:
    result = run_cli("-s", SNAPSHOT, "-", "-", stdin=CHART)
    assert result.code == 2
    assert "- (standard input) can be given once" in result.stderr


def test_f_is_accepted_as_explain_takes_it(tmp_path: Path) -> None:
    chart = tmp_path / "chart.yaml"
    chart.write_text(CHART)
    by_flag = run_cli("-s", SNAPSHOT, "-f", chart, "-o", "json", "--now", "1")
    by_arg = run_cli("-s", SNAPSHOT, chart, "-o", "json", "--now", "1")
    assert by_flag.code == by_arg.code == 0
    assert by_flag.stdout == by_arg.stdout


def test_a_file_of_other_kinds_only_places_nothing_and_says_so(tmp_path: Path) -> None:
    services = tmp_path / "svc.yaml"
    services.write_text(CHART.split("---", maxsplit=1)[0])
    result = run_cli("-s", SNAPSHOT, services)
    assert result.code == 1
    assert f"error: {services}: makes no pod: it holds no Pod and no workload" in result.stderr


def test_fail_on_pending_fails_for_a_pod_a_typo_left_without_a_device(tmp_path: Path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text(TYPO)
    plain = run_cli("-s", SNAPSHOT, typo)
    assert plain.code == 0
    assert 'unknown field "spec.containers[0].resource"' in plain.stderr
    failing = run_cli("-s", SNAPSHOT, typo, "--fail-on-pending")
    assert failing.code == 3
    assert "--fail-on-pending: 1 of 1 pod not placed (1 asking for no device beside a warning)" in failing.stderr
    strict = run_cli("-s", SNAPSHOT, typo, "--strict")
    assert strict.code == 4
    assert "--strict: 1 warning (above); exit status 4" in strict.stderr


def test_strict_passes_clean_input_and_notes_do_not_fail_it() -> None:
    result = run_cli("-s", SNAPSHOT, "-", "--strict", stdin=CHART)
    assert result.code == 0, result.stderr
    assert "note:" in result.stderr


def test_demo_places_the_pod_files_given_with_it(tmp_path: Path) -> None:
    chart = tmp_path / "chart.yaml"
    chart.write_text(CHART)
    result = run_cli("--demo", chart)
    assert result.code == 0, result.stderr
    assert result.stdout.startswith("hami simulate --demo: 19 nodes, 71 devices; 2 pods in order: 2 placed")
    assert run_cli("--demo", "-s", SNAPSHOT).code == 2


def test_yaml_output_is_the_json_document() -> None:
    as_json = run_cli("-s", SNAPSHOT, "-", "-o", "json", "--now", "1", stdin=CHART)
    as_yaml = run_cli("-s", SNAPSHOT, "-", "-o", "yaml", "--now", "1", stdin=CHART)
    assert as_yaml.code == 0
    assert yaml.safe_load(as_yaml.stdout) == json.loads(as_json.stdout)


def test_defrag_yaml_output() -> None:
    result = run_cli("-s", SNAPSHOT, "--defrag", "-o", "yaml")
    assert result.code == 0
    assert yaml.safe_load(result.stdout)["kept"] == [
        {
            "pod": "ml/train-a",
            "reason": "no controller: deleting it would lose it (give it a Deployment, or move it by hand)",
        }
    ]


def test_empty_and_binary_pod_files_fail_naming_the_file(tmp_path: Path) -> None:
    empty, garbage = tmp_path / "empty.yaml", tmp_path / "garbage.bin"
    empty.write_text("")
    garbage.write_bytes(bytes(range(256)))
    result = run_cli("-s", SNAPSHOT, empty)
    assert result.code == 1
    assert result.stderr.startswith(f"error: {empty}: holds no Kubernetes object")
    result = run_cli("-s", SNAPSHOT, garbage)
    assert result.code == 1
    assert result.stderr.startswith(f"error: {garbage}: not a text file (byte 0x80 at offset 128 is not UTF-8)")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["simulate", "--demo", "--node-policy", "spred"], "did you mean spread?"),
        (["simulate", "--demo", "--gpu-policy", "binpak,spread"], "did you mean binpack?"),
        (["simulate", "--demo", "-o", "jsn"], "'jsn' is not one of table, json, yaml; did you mean json?"),
        (["top", "-s", str(SNAPSHOT), "--sort", "strand"], "did you mean stranded?"),
        (["top", "-s", str(SNAPSHOT), "--color", "alwys"], "did you mean always?"),
        (["top", "-s", str(SNAPSHOT), "-o", "wid"], "did you mean wide?"),
        (["explain", "-s", str(SNAPSHOT), "ml/llm", "-o", "yml"], "did you mean yaml?"),
        (["version", "-o", "josn"], "did you mean json?"),
        (["device-plugin", "--dry-run", "--log-level", "debg"], "did you mean debug?"),
        (["monitor", "--log-level", "warnng"], "did you mean warning?"),
    ],
    ids=[
        "node-policy",
        "gpu-policy",
        "simulate-output",
        "sort",
        "color",
        "top-output",
        "explain-output",
        "version",
        "device-plugin-log-level",
        "monitor-log-level",
    ],
)
def test_every_choice_flag_says_did_you_mean(args: list[str], expected: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert expected in result.stderr
    assert "Value error" not in result.stderr
