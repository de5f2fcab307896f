"""hami's choices per Kubernetes release (``hami.protocol.kubeversion``): one case per branch."""

from __future__ import annotations

import pytest

from hami.protocol.kubeversion import TESTED, KubeVersion, parse_kube_version, server_profile


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("v1.36.3", KubeVersion(1, 36, 3)),
        ("v1.38.0-beta.0", KubeVersion(1, 38, 0, "beta.0")),
        ("v1.37.2-eks-4", KubeVersion(1, 37, 2)),  # a vendor's suffix is no pre-release
        ("v1.36.3+k3s1", KubeVersion(1, 36, 3)),
        ("1.39.0-rc.1", KubeVersion(1, 39, 0, "rc.1")),
    ],
)
def test_git_versions_parse_to_releases(text: str, expected: KubeVersion) -> None:
    assert parse_kube_version(text) == expected
    assert str(expected).startswith("v1.")


def test_a_git_version_that_is_no_release_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"gitVersion 'devel' is not a Kubernetes release"):
        parse_kube_version("devel")


def test_a_beta_sorts_before_its_release_line_and_after_the_previous_one() -> None:
    assert KubeVersion(1, 37, 2) < KubeVersion(1, 38, 0, "beta.0") < KubeVersion(1, 38, 1)


def test_the_tested_releases_are_exactly_the_tested_window() -> None:
    for text in TESTED:
        assert server_profile(parse_kube_version(text)).tested
    for text in ("v1.35.4", "v1.38.0-beta.0", "v1.38.1"):
        assert not server_profile(parse_kube_version(text)).tested


@pytest.mark.parametrize(
    ("version", "dra_api", "capacity", "gang", "empty_victims"),
    [
        ("v1.33.5", "", "absent", "the pod-group label only", False),
        ("v1.34.2", "resource.k8s.io/v1", "alpha, off by default", "the pod-group label only", False),
        ("v1.35.4", "resource.k8s.io/v1", "alpha, off by default", "spec.workloadRef, which hami does not read", False),
        ("v1.36.3", "resource.k8s.io/v1", "beta, on by default", "scheduling.k8s.io/v1alpha2", False),
        ("v1.37.2", "resource.k8s.io/v1", "beta, on by default", "scheduling.k8s.io/v1beta1", False),
        ("v1.38.0-beta.0", "resource.k8s.io/v1", "GA", "scheduling.k8s.io/v1beta1", True),
        ("v1.39.1", "resource.k8s.io/v1", "GA", "scheduling.k8s.io/v1beta1", True),
    ],
)
def test_what_hami_chooses_per_release(
    version: str, dra_api: str, capacity: str, gang: str, empty_victims: bool
) -> None:
    profile = server_profile(parse_kube_version(version))
    assert profile.dra_api == dra_api
    assert profile.consumable_capacity == capacity
    assert gang in profile.gang
    assert profile.preemption_empty_victims is empty_victims
    assert profile.scheduler_config_api == "kubescheduler.config.k8s.io/v1"


def test_a_scheduler_configuration_older_than_v1_is_named_unsupported() -> None:
    assert server_profile(KubeVersion(1, 24, 0)).scheduler_config_api == "older than v1 (unsupported)"


def test_the_log_line_says_the_version_each_choice_and_whether_it_is_tested() -> None:
    tested = server_profile(parse_kube_version("v1.37.2")).describe()
    assert tested.startswith("Kubernetes v1.37.2 (tested): DRA resource.k8s.io/v1, consumable capacity beta, on by")
    assert "extender preemption calls carry nodes with victims only" in tested
    newer = server_profile(parse_kube_version("v1.38.0-beta.0")).describe()
    assert newer.startswith("Kubernetes v1.38.0-beta.0 (NOT tested (hami is tested on v1.36.3, v1.37.2)): DRA")
    assert "extender preemption calls carry nodes with empty victim lists too (1.38+)" in newer
    old = server_profile(parse_kube_version("v1.33.1")).describe()
    assert "(NOT tested (hami is tested on v1.36.3, v1.37.2))" in old
    assert "DRA not watched (resource.k8s.io/v1 is 1.34+)" in old
    assert "extender preemption calls carry nodes with victims only" in old
