"""``--preemption``: the mode chosen at start-up; ``auto`` is ``self`` on every version (``preemptmode``)."""

from __future__ import annotations

import pytest

from hami.config.settings import PreemptionMode
from hami.server.preemptmode import parse_version, resolve_preemption


@pytest.mark.parametrize(
    ("version", "mode"),
    [
        pytest.param("v1.36.3", "self", id="1.36-hami-evicts"),
        pytest.param("v1.37.2", "self", id="1.37-hami-evicts"),
        pytest.param("v1.38.0", "self", id="1.38-hami-evicts-the-preempt-verb-only-by-choice"),
        pytest.param("v1.39.1-eks-4a2b", "self", id="later-with-a-vendor-suffix"),
        pytest.param("v2.0.0", "self", id="a-later-major"),
        pytest.param("not-a-version", "self", id="unreadable-version-hami-evicts"),
        pytest.param(None, "self", id="version-not-read-hami-evicts"),
    ],
)
def test_auto_is_the_verified_self_mode_on_every_version(version: str | None, mode: str) -> None:
    chosen, why = resolve_preemption("auto", version)
    assert chosen == mode
    assert why.startswith("--preemption=auto: ")


def test_auto_on_1_38_says_the_preempt_verb_needs_the_explicit_mode() -> None:
    _, why = resolve_preemption("auto", "v1.38.0")
    assert why == (
        "--preemption=auto: hami preempts itself on Kubernetes v1.38.0 too (kube-scheduler's preempt verb is used "
        "only with --preemption=extender)"
    )


@pytest.mark.parametrize("mode", ["extender", "self", "off"])
def test_an_explicit_mode_is_kept_whatever_the_version(mode: PreemptionMode) -> None:
    assert resolve_preemption(mode, "v1.36.3") == (mode, f"--preemption={mode}")
    assert resolve_preemption(mode, "v1.38.0") == (mode, f"--preemption={mode}")


def test_versions_parse_to_major_and_minor() -> None:
    assert parse_version("v1.36.3") == (1, 36)
    assert parse_version("1.38.0+k3s1") == (1, 38)
    assert parse_version("") is None
