"""Fixtures for the Kubernetes I/O tests: a scripted API server, a client wired to it, virtual time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from hami.k8s.client import ClientSettings, KubeClient
from hami.k8s.cluster import ClusterClient, KubeCluster
from hami.k8s.config import KubeConfig
from hami.k8s.memory import MemoryCluster
from tests.unit.k8s.fakeapi import FakeApi, serve

NOW = datetime(2026, 8, 21, 6, 20, 39, 123456, tzinfo=UTC)
"""The wall time of the tests' cluster seams."""


class FakeClock:
    """Monotonic seconds that move only when a test (or :class:`FakeSleep`) moves them."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeSleep:
    """Records every requested delay and advances the clock instead of waiting."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.delays: list[float] = []
        self.clock = clock

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        if self.clock is not None:
            self.clock.advance(seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sleep(clock: FakeClock) -> FakeSleep:
    return FakeSleep(clock)


@pytest.fixture
async def api() -> AsyncIterator[FakeApi]:
    fake = FakeApi()
    async with serve(fake.app) as url:
        fake.url = url
        yield fake


@pytest.fixture
async def client(api: FakeApi, clock: FakeClock, sleep: FakeSleep) -> AsyncIterator[KubeClient]:
    config = KubeConfig(server=api.url, token="t0ken")
    async with KubeClient(
        config, ClientSettings(request_timeout=5, retry_jitter=0.0), clock=clock, sleep=sleep
    ) as kube:
        yield kube


@dataclass
class Seam:
    cluster: ClusterClient
    backing: MemoryCluster


@pytest.fixture(params=["memory", "kube"])
def seam(request: pytest.FixtureRequest) -> Seam:
    """The in-memory seam, or the real one over HTTP against a fake API server backed by a MemoryCluster."""
    if request.param == "memory":
        memory = MemoryCluster()
        return Seam(memory, memory)
    api: FakeApi = request.getfixturevalue("api")
    client: KubeClient = request.getfixturevalue("client")
    return Seam(KubeCluster(client, instance="sched-0", clock=lambda: NOW), api.memory)
