from __future__ import annotations

import asyncio
import logging

import pytest

from hami.k8s.tasks import Supervisor


async def test_a_failing_task_is_logged_at_once_and_remembered(caplog: pytest.LogCaptureFixture) -> None:
    async def boom() -> None:
        raise ValueError("kaput")

    async with Supervisor() as tasks:
        task = tasks.start(boom(), name="boom")
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0)  # let the done callback run
        assert isinstance(tasks.failures["boom"], ValueError)
        assert tasks.running == 0
    assert any(r.levelno == logging.ERROR and "task boom failed" in r.getMessage() for r in caplog.records)


async def test_stop_cancels_every_task_and_waits_for_it() -> None:
    cleaned: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append(name)

    tasks = Supervisor()
    tasks.start(forever("a"), name="a")
    tasks.start(forever("b"), name="b")
    await asyncio.sleep(0)
    await tasks.stop()
    assert sorted(cleaned) == ["a", "b"]
    assert tasks.running == 0
    assert tasks.failures == {}


async def test_a_loop_that_returns_early_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    async def quits() -> None:
        return

    async with Supervisor() as tasks:
        await tasks.start(quits(), name="quitter")
        await asyncio.sleep(0)
    assert any("task quitter ended on its own" in r.getMessage() for r in caplog.records)


async def test_no_task_starts_once_stopping() -> None:
    tasks = Supervisor()
    await tasks.stop()

    async def noop() -> None:
        return

    with pytest.raises(RuntimeError, match="supervisor is stopping"):
        tasks.start(noop(), name="late")
