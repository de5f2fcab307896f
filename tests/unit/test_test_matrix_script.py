"""scripts/test-matrix's pure parts: the counts it reads from pytest's JUnit report and the table it prints."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "test-matrix"


def _load() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("hami_test_matrix", str(SCRIPT))
    spec = importlib.util.spec_from_loader("hami_test_matrix", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    loader.exec_module(module)
    return module


matrix = _load()

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.e2e.test_smoke" name="test_version" time="0.1"/>
<testcase classname="tests.e2e.test_dra" name="test_claims" time="2.0"><failure message="boom"/></testcase>
<testcase classname="tests.e2e.test_install" name="test_setup" time="1.0"><error message="no node"/></testcase>
<testcase classname="tests.chart.test_chart" name="test_lint" time="1.0"><skipped message="later"/></testcase>
<testcase classname="tests.chart.test_chart" name="test_render" time="1.0"/>
</testsuite></testsuites>
"""


def test_counts_and_failed_ids_come_from_the_junit_report(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(JUNIT)
    row = matrix.Row("v1.37.2", seconds=754.4)
    matrix.junit_counts(report, row)
    assert (row.passed, row.failed, row.skipped) == (2, 2, 1)
    assert row.failures == ["tests.e2e.test_dra::test_claims", "tests.e2e.test_install::test_setup"]
    assert not row.ok
    assert row.cells() == ["v1.37.2", "2", "2", "1", "12m34s", "FAILED"]


def test_the_table_has_a_row_per_release_and_says_why_one_was_not_built() -> None:
    green = matrix.Row("v1.36.3", passed=310, seconds=61)
    missing = matrix.Row("v1.38.0-beta.0", not_built="the Go module proxy does not serve: k8s.io/x@v0.38.0-beta.0")
    text = matrix.table([green, missing])
    assert text.splitlines() == [
        "| Kubernetes | passed | failed | skipped | time | result |",
        "|---|---|---|---|---|---|",
        "| v1.36.3 | 310 | 0 | 0 | 1m01s | green |",
        "| v1.38.0-beta.0 | — | — | — | — | not built: the Go module proxy does not serve: k8s.io/x@v0.38.0-beta.0 |",
    ]
    assert green.ok
    assert not missing.ok
