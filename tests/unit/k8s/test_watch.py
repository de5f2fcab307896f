from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable

import pytest

from hami.k8s.client import KubeClient
from hami.k8s.records import EventType
from hami.k8s.resources import PODS
from hami.k8s.tasks import Supervisor
from hami.k8s.watch import Callbacks, Reflector, WatchSettings
from hami.protocol.objects import Pod
from tests.unit.k8s.conftest import FakeClock, FakeSleep
from tests.unit.k8s.fakeapi import FakeApi, Reply, Stream, event_line, obj, status_body

PATH = "/api/v1/pods"
SYNC = ("SYNC",)


class Recorder:
    """A handler that writes down what it is told: (event, name, rv, old rv) and SYNC markers."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.seen: list[tuple[str, ...]] = []
        self.fail_on = fail_on

    def on_event(self, event: EventType, obj: Pod, old: Pod | None) -> None:
        old_rv = old.metadata.resource_version if old is not None else "-"
        self.seen.append((event.value, obj.metadata.name, obj.metadata.resource_version, old_rv))
        if obj.metadata.name == self.fail_on:
            raise RuntimeError("handler bug")

    def on_sync(self) -> None:
        self.seen.append(SYNC)


class FixedRandom(random.Random):
    def random(self) -> float:
        return 0.5  # jitter adds 0.5 × 20 % = 10 %


def page(rv: str, *items: dict[str, object], cont: str = "") -> Reply:
    return Reply(body={"metadata": {"resourceVersion": rv, "continue": cont}, "items": list(items)})


def lines(*events: tuple[str, dict[str, object]]) -> list[bytes]:
    return [event_line(t, o) + b"\n" for t, o in events]


def bookmark(rv: str) -> dict[str, object]:
    return {"kind": "Pod", "metadata": {"resourceVersion": rv, "annotations": {"k8s.io/initial-events-end": "true"}}}


Run = Callable[[Recorder], "asyncio.Future[Reflector[Pod]]"]


@pytest.fixture
async def run_until_idle(
    api: FakeApi, client: KubeClient, sleep: FakeSleep, clock: FakeClock
) -> AsyncIterator[Callable[..., object]]:
    """Run a reflector until it has consumed the script (a watch finds nothing queued), then stop it."""
    async with Supervisor() as tasks:

        async def run(handler: Recorder, **settings: object) -> Reflector[Pod]:
            reflector = Reflector(
                client,
                PODS,
                Pod,
                handler,
                settings=WatchSettings(**settings),
                sleep=sleep,
                clock=clock,
                rng=FixedRandom(),
            )
            task = tasks.start(reflector.run(), name="reflector pods")
            await asyncio.wait_for(api.idle.wait(), 10)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            assert not tasks.failures
            return reflector

        yield run


async def test_lists_every_page_then_watches_and_resumes_after_a_normal_close(
    api: FakeApi, run_until_idle, sleep: FakeSleep
) -> None:
    api.script("GET", PATH, page("10", obj("a", "1"), obj("b", "2"), cont="next"), page("10", obj("c", "3")))
    api.script(
        "WATCH",
        PATH,
        Stream(lines(("MODIFIED", obj("a", "11")), ("BOOKMARK", bookmark("15")))),  # server closes normally
        Stream(lines(("ADDED", obj("d", "16")), ("DELETED", obj("b", "17")))),
    )
    handler = Recorder()
    reflector = await run_until_idle(handler, page_size=2)
    assert handler.seen == [
        ("ADDED", "a", "1", "-"),
        ("ADDED", "b", "2", "-"),
        ("ADDED", "c", "3", "-"),
        SYNC,
        ("MODIFIED", "a", "11", "1"),
        ("ADDED", "d", "16", "-"),
        ("DELETED", "b", "17", "-"),
    ]
    assert [r.query.get("continue") for r in api.calls("GET", PATH)] == [None, "next"]
    assert [r.query["resourceVersion"] for r in api.calls("WATCH", PATH)] == ["10", "15", "17"]
    assert all(r.query["allowWatchBookmarks"] == "true" for r in api.calls("WATCH"))
    assert sleep.delays == []  # resuming after a normal close does not wait
    assert reflector.synced.is_set()
    assert sorted(reflector.store) == ["default/a", "default/c", "default/d"]
    assert (reflector.lists, reflector.resource_version) == (1, "17")


@pytest.mark.parametrize(
    "gone",
    [
        Stream(lines(("ERROR", status_body(410, "too old resource version", "Expired")))),
        Reply(410, status_body(410, "too old resource version", "Expired")),
    ],
    ids=["error-event", "http-410"],
)
async def test_gone_relists_after_a_backoff_and_delivers_the_difference(
    api: FakeApi, run_until_idle, sleep: FakeSleep, gone: Reply | Stream
) -> None:
    api.script(
        "GET",
        PATH,
        page("10", obj("a", "1"), obj("b", "2"), obj("c", "3"), obj("e", "4")),
        # b vanished, a unchanged, c changed, d new, and e re-created under the same name with a new UID:
        page("30", obj("a", "1"), obj("c", "25"), obj("d", "26"), obj("e", "27", uid="uid-e2")),
    )
    api.script("WATCH", PATH, gone)
    handler = Recorder()
    reflector = await run_until_idle(handler)
    assert handler.seen == [
        ("ADDED", "a", "1", "-"),
        ("ADDED", "b", "2", "-"),
        ("ADDED", "c", "3", "-"),
        ("ADDED", "e", "4", "-"),
        SYNC,
        ("MODIFIED", "c", "25", "3"),
        ("ADDED", "d", "26", "-"),
        ("DELETED", "e", "4", "-"),
        ("ADDED", "e", "27", "-"),
        ("DELETED", "b", "2", "-"),
        SYNC,
    ]
    assert sleep.delays == pytest.approx([0.55])  # 0.5 s first step + 10 % jitter
    assert [r.query["resourceVersion"] for r in api.calls("WATCH")] == ["10", "30"]
    assert reflector.lists == 2


async def test_a_broken_stream_resumes_from_its_version_with_a_growing_backoff(
    api: FakeApi, run_until_idle, sleep: FakeSleep
) -> None:
    api.script("GET", PATH, page("10", obj("a", "1")))
    api.script(
        "WATCH",
        PATH,
        Stream(lines(("MODIFIED", obj("a", "11"))), end="break"),
        Stream([], end="break"),  # breaks before any event: the backoff keeps growing
        Stream(lines(("MODIFIED", obj("a", "12")))),
    )
    handler = Recorder()
    reflector = await run_until_idle(handler)
    # broken after an event: first step; broken at once: ×2. No relist: the server is not handed a full list.
    assert sleep.delays == pytest.approx([0.55, 1.1])
    assert [r.query["resourceVersion"] for r in api.calls("WATCH")] == ["10", "11", "11", "12"]
    assert handler.seen == [("ADDED", "a", "1", "-"), SYNC, ("MODIFIED", "a", "11", "1"), ("MODIFIED", "a", "12", "11")]
    assert (reflector.lists, reflector.resumes) == (1, 2)


async def test_a_throttled_watch_waits_for_retry_after_and_resumes_without_relisting(
    api: FakeApi, run_until_idle, sleep: FakeSleep
) -> None:
    api.script("GET", PATH, page("10", obj("a", "1")))
    throttled = Reply(429, status_body(429, "too many requests, please try again later"), headers={"Retry-After": "3"})
    api.script("WATCH", PATH, throttled, Stream(lines(("MODIFIED", obj("a", "11")))))
    handler = Recorder()
    reflector = await run_until_idle(handler)
    assert sleep.delays == pytest.approx([3.0])  # the server's wait, longer than the first backoff step
    assert [r.query["resourceVersion"] for r in api.calls("WATCH")] == ["10", "10", "11"]
    assert (reflector.lists, reflector.resumes) == (1, 1)
    assert len(api.calls("GET", PATH)) == 1


async def test_failing_lists_are_retried_by_the_client_then_by_the_reflector(
    api: FakeApi, run_until_idle, sleep: FakeSleep
) -> None:
    api.script(
        "GET",
        PATH,
        Reply(500, status_body(500, "etcd is sad")),
        Reply(503, status_body(503, "still sad")),
        page("12", obj("a", "11")),
    )
    handler = Recorder()
    reflector = await run_until_idle(handler)
    assert sleep.delays == pytest.approx([0.2, 0.4])  # the client's GET retries; the reflector never saw a failure
    assert handler.seen == [("ADDED", "a", "11", "-"), SYNC]
    assert reflector.lists == 1


async def test_a_watch_that_closes_at_once_and_empty_is_resumed_after_a_pause(
    api: FakeApi, run_until_idle, sleep: FakeSleep
) -> None:
    api.script("GET", PATH, page("10", obj("a", "1")))
    api.script("WATCH", PATH, Stream([]), Stream([]), Stream(lines(("MODIFIED", obj("a", "11")))))
    handler = Recorder()
    reflector = await run_until_idle(handler)
    assert sleep.delays == pytest.approx([0.55, 1.1])  # paused and growing, but no relist
    assert [r.query["resourceVersion"] for r in api.calls("WATCH")] == ["10", "10", "10", "11"]
    assert reflector.lists == 1


async def test_watch_events_are_normalised_against_the_store(api: FakeApi, run_until_idle) -> None:
    api.script("GET", PATH, page("10", obj("a", "1")))
    api.script(
        "WATCH",
        PATH,
        Stream(
            lines(
                ("ADDED", obj("a", "11")),  # known → MODIFIED
                ("MODIFIED", obj("b", "12")),  # unknown → ADDED
                ("MODIFIED", obj("a", "13", uid="uid-a2")),  # same name, new UID → DELETED old + ADDED new
                ("DELETED", obj("zz", "14")),  # never seen: still told
            )
        ),
    )
    handler = Recorder()
    reflector = await run_until_idle(handler)
    assert handler.seen[2:] == [
        ("MODIFIED", "a", "11", "1"),
        ("ADDED", "b", "12", "-"),
        ("DELETED", "a", "11", "-"),
        ("ADDED", "a", "13", "-"),
        ("DELETED", "zz", "14", "-"),
    ]
    assert reflector.store["default/a"].metadata.uid == "uid-a2"


async def test_a_failing_handler_is_counted_and_the_cache_goes_on(api: FakeApi, run_until_idle) -> None:
    api.script("GET", PATH, page("10", obj("a", "1"), obj("bad", "2"), obj("c", "3")))
    handler = Recorder(fail_on="bad")
    reflector = await run_until_idle(handler)
    assert [s[1] for s in handler.seen if s != SYNC] == ["a", "bad", "c"]
    assert reflector.handler_errors == 1
    assert len(reflector.store) == 3


async def test_an_undecodable_object_relists_with_backoff_instead_of_being_dropped(
    api: FakeApi, run_until_idle, sleep: FakeSleep
) -> None:
    api.script("GET", PATH, page("10", obj("a", "1")), page("11", obj("a", "1")))
    api.script("WATCH", PATH, Stream([b'{"type":"ADDED","object":{"metadata":{"name":7}}}\n']))
    handler = Recorder()
    reflector = await run_until_idle(handler)
    assert reflector.lists == 2
    assert sleep.delays == pytest.approx([0.55])


def test_backoff_grows_by_the_factor_and_is_capped() -> None:
    reflector = Reflector.__new__(Reflector)
    reflector.settings = WatchSettings(backoff_initial=0.5, backoff_factor=2, backoff_max=30, backoff_jitter=0.2)
    reflector._random = FixedRandom()
    assert [reflector.backoff(n) for n in range(8)] == pytest.approx(
        [0.55, 1.1, 2.2, 4.4, 8.8, 17.6, 33.0, 33.0]  # capped at 30 s, then jitter
    )


def test_callbacks_adapt_on_change_functions() -> None:
    changes: list[tuple[str, bool]] = []
    synced: list[bool] = []
    handler = Callbacks(lambda pod, deleted: changes.append((pod.metadata.name, deleted)), lambda: synced.append(True))
    a = Pod()
    a.metadata.name = "a"
    for event in (EventType.ADDED, EventType.MODIFIED, EventType.DELETED):
        handler.on_event(event, a, None)
    handler.on_sync()
    Callbacks(lambda pod, deleted: None).on_sync()  # without on_synced: nothing to call
    assert changes == [("a", False), ("a", False), ("a", True)]
    assert synced == [True]
