"""Reading the API server's version at start (``hami.k8s.serverversion``) against a scripted API server."""

from __future__ import annotations

import logging

import pytest

from hami.k8s.client import KubeClient
from hami.k8s.serverversion import read_server_profile
from tests.unit.k8s.fakeapi import FakeApi, Reply, status_body


async def test_a_tested_release_is_logged_at_info(
    api: FakeApi, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    api.script("GET", "/version", Reply(body={"major": "1", "minor": "37", "gitVersion": "v1.37.2"}))
    with caplog.at_level(logging.INFO, logger="hami.k8s.serverversion"):
        profile = await read_server_profile(client)
    assert profile is not None
    assert str(profile.version) == "v1.37.2"
    [record] = caplog.records
    assert record.levelno == logging.INFO
    assert record.getMessage().startswith("Kubernetes v1.37.2 (tested):")


async def test_an_untested_release_is_a_warning(
    api: FakeApi, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    api.script("GET", "/version", Reply(body={"gitVersion": "v1.33.4-gke.100"}))
    with caplog.at_level(logging.INFO, logger="hami.k8s.serverversion"):
        profile = await read_server_profile(client)
    assert profile is not None
    assert profile.dra_api == ""
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert "Kubernetes v1.33.4 (NOT tested" in record.getMessage()


@pytest.mark.parametrize(
    "reply",
    [Reply(403, status_body(403, "forbidden")), Reply(body={"gitVersion": "devel"})],
    ids=["refused", "no release"],
)
async def test_a_version_that_cannot_be_read_acts_as_a_tested_release_and_says_so(
    api: FakeApi, client: KubeClient, caplog: pytest.LogCaptureFixture, reply: Reply
) -> None:
    api.script("GET", "/version", reply)
    with caplog.at_level(logging.INFO, logger="hami.k8s.serverversion"):
        assert await read_server_profile(client) is None
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert "could not tell the API server's Kubernetes version" in record.getMessage()
    assert "acting as on a tested release (v1.36.3, v1.37.2)" in record.getMessage()
