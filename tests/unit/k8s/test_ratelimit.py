from __future__ import annotations

import pytest

from hami.errors import ConfigError
from hami.k8s.ratelimit import TokenBucket
from tests.unit.k8s.conftest import FakeClock, FakeSleep


def test_the_burst_is_free_then_requests_are_spaced_by_one_over_qps(clock: FakeClock) -> None:
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(6)] == pytest.approx([0, 0, 0, 0.1, 0.2, 0.3])


def test_tokens_refill_with_time_up_to_the_burst(clock: FakeClock) -> None:
    bucket = TokenBucket(qps=2, burst=2, clock=clock)
    assert [bucket.reserve(), bucket.reserve()] == [0, 0]
    clock.advance(0.5)  # one token back
    assert bucket.reserve() == 0
    assert bucket.reserve() == pytest.approx(0.5)
    clock.advance(60)  # a long idle period refills only to the burst
    assert [bucket.reserve() for _ in range(3)] == pytest.approx([0, 0, 0.5])


def test_reservations_keep_the_long_run_rate(clock: FakeClock) -> None:
    bucket = TokenBucket(qps=100, burst=200, clock=clock)
    delays = [bucket.reserve() for _ in range(1200)]
    # 1,200 requests at once: 200 immediately, the last one waits (1200 - 200) / 100 s
    assert delays[199] == 0
    assert delays[-1] == pytest.approx(10.0)


async def test_acquire_sleeps_only_when_the_bucket_is_empty(clock: FakeClock) -> None:
    sleep = FakeSleep(clock)
    bucket = TokenBucket(qps=4, burst=1, clock=clock, sleep=sleep)
    for _ in range(3):
        await bucket.acquire()
    assert sleep.delays == pytest.approx([0.25, 0.25])


def test_zero_qps_disables_limiting(clock: FakeClock) -> None:
    bucket = TokenBucket(qps=0, burst=0, clock=clock)
    assert {bucket.reserve() for _ in range(1000)} == {0}


def test_a_positive_qps_needs_a_burst_of_at_least_one(clock: FakeClock) -> None:
    with pytest.raises(ConfigError, match="kube-burst: must be at least 1"):
        TokenBucket(qps=5, burst=0, clock=clock)
