"""The reason-code glossary (``docs/reason-codes.md``) against the code: every code hami writes into an answer, an
event, a problem report or a metric label has a row there, and every row names a code hami has."""

from __future__ import annotations

import re
from pathlib import Path

from hami.deviceplugin.hamicore import EVENT_REASON as HAMI_CORE_MISSING
from hami.protocol.events import EventReason
from hami.protocol.reasons import Reason
from hami.scheduling.audit import DriftKind
from hami.scheduling.dra.mapping import ProblemKind
from hami.scheduling.dra.reports import WarningKind
from hami.scheduling.outcomes import Bound, Filtered, Preempting
from hami.server.dra import event_reason
from hami.server.draclaims import CLAIM_CONFLICT, CLAIM_FAILED, CLAIM_REFUSED, RESULTS
from hami.server.extender import _BIND_LABELS  # the bind outcomes' metric labels, where not their own names
from hami.server.nodes import REGISTRATION_REFUSED

GLOSSARY = (Path(__file__).resolve().parents[2] / "docs/reason-codes.md").read_text()


def _section(title: str) -> str:
    """The text of the glossary's ``## title`` section."""
    return GLOSSARY.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _first_cells(text: str) -> set[str]:
    """The code spans of each table row's first cell."""
    cells = [line.split("|")[1] for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    return {span for cell in cells for span in re.findall(r"`([^`]+)`", cell)}


def test_every_fit_reason_has_a_row_and_every_row_is_a_reason() -> None:
    rows = _first_cells(_section("Why a card or a node does not fit"))
    assert rows == {reason.value for reason in Reason}


def test_every_event_reason_has_a_row() -> None:
    rows = _first_cells(_section("Events"))
    codes = {reason.value for reason in EventReason} | {REGISTRATION_REFUSED, HAMI_CORE_MISSING}
    codes |= {event_reason(kind) for kind in ProblemKind}
    codes |= {CLAIM_CONFLICT, CLAIM_FAILED, CLAIM_REFUSED}
    assert rows == codes


def test_every_dra_problem_and_warning_has_a_row() -> None:
    rows = _first_cells(_section("DRA problems and warnings"))
    assert rows == {kind.value for kind in ProblemKind} | {kind.value for kind in WarningKind}


def test_every_metric_label_value_is_explained() -> None:
    section = _section("Metric labels")
    spans = set(re.findall(r"`([^`]+)`", section))
    labels = {f.value for f in Filtered} | {"cleanup-retried"}
    labels |= {_BIND_LABELS.get(b, b.value) for b in Bound}
    labels |= {p.value for p in Preempting} | {d.value for d in DriftKind}
    labels |= set(RESULTS)
    missing = sorted(labels - spans)
    assert not missing, f"docs/reason-codes.md does not explain the label values {missing}"
