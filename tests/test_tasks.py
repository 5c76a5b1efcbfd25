"""Background tasks' owners (replog/tasks.py): stopping waits for every task to end, a caller's
own cancellation is never swallowed, and a task that fails is logged as it ends."""

from __future__ import annotations

import asyncio
import logging

import anyio
import pytest

from replog.tasks import TaskOwner, cancel_and_wait, first_failure

WAIT_S = 10


class Stubborn:
    """A task's body that runs until cancelled, then ends its cleanup only once released."""

    def __init__(self, name: str, released: bool = False):
        self.name = name
        self.started, self.cleaning, self.release = asyncio.Event(), asyncio.Event(), asyncio.Event()
        if released:
            self.release.set()
        self.cleaned = False

    async def run(self) -> None:
        try:
            self.started.set()
            await asyncio.Event().wait()
        finally:
            self.cleaning.set()
            await self.release.wait()
            self.cleaned = True


async def _all_set(events) -> None:
    await asyncio.wait_for(asyncio.gather(*(event.wait() for event in events)), WAIT_S)


async def test_cancel_and_wait_returns_once_every_task_has_ended_whatever_its_outcome():
    bodies = [Stubborn("first"), Stubborn("second")]
    slow = [asyncio.create_task(body.run()) for body in bodies]

    async def fails() -> None:
        raise ValueError("its own outcome")

    failed = asyncio.create_task(fails())
    await _all_set(body.started for body in bodies)
    await asyncio.wait({failed}, timeout=WAIT_S)
    stopping = asyncio.create_task(cancel_and_wait(*slow, failed))
    await _all_set(body.cleaning for body in bodies)
    assert not stopping.done()  # each task is still cleaning up
    for body in bodies:
        body.release.set()
    await asyncio.wait_for(stopping, WAIT_S)  # the failure is the task's, not raised here
    assert all(body.cleaned for body in bodies) and all(task.cancelled() for task in slow)


async def test_a_caller_cancelled_while_it_waits_is_cancelled_itself():
    """Not `except CancelledError` around an await of the task: a stop that is stopped itself
    must not go on as if it had not been."""
    body = Stubborn("task")
    task = asyncio.create_task(body.run())
    await _all_set([body.started])
    went_on: list[str] = []

    async def stop() -> None:
        await cancel_and_wait(task)
        went_on.append("after the wait")

    stopper = asyncio.create_task(stop())
    await _all_set([body.cleaning])
    stopper.cancel()
    body.release.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(stopper, WAIT_S)
    assert went_on == []
    await asyncio.wait({task}, timeout=WAIT_S)
    assert task.done()


async def test_a_task_that_fails_is_logged_as_it_ends_and_leaves_its_owner(caplog):
    owner = TaskOwner("test chore")

    async def fails() -> None:
        raise ValueError("a bug")

    with caplog.at_level(logging.ERROR, logger="replog.tasks"):
        task = owner.start(fails(), name="failing-chore")
        seen = asyncio.Event()
        task.add_done_callback(lambda _: seen.set())  # after the owner's, in the order added
        await _all_set([seen])
    failures = [record for record in caplog.records if record.name == "replog.tasks"]
    assert [record.getMessage() for record in failures] == ["test chore failed task=failing-chore"]
    assert isinstance(failures[0].exc_info[1], ValueError)
    assert owner.keys() == [] and not owner.running("failing-chore")
    await owner.close()


async def test_stop_ends_the_tasks_under_its_keys_only_and_close_ends_every_one():
    owner = TaskOwner("test follower")
    bodies = {name: Stubborn(name, released=True) for name in ("a-1", "a-2", "b")}
    tasks = {name: owner.start(body.run(), name=name, key=name[0]) for name, body in bodies.items()}
    await _all_set(body.started for body in bodies.values())
    assert sorted(owner.keys()) == ["a", "b"] and owner.running("a")

    await owner.stop("a", "absent")
    assert bodies["a-1"].cleaned and bodies["a-2"].cleaned and tasks["a-1"].cancelled() and tasks["a-2"].cancelled()
    assert not bodies["b"].cleaned and owner.running("b") and not owner.running("a")

    await owner.close()
    assert bodies["b"].cleaned and tasks["b"].cancelled() and owner.keys() == []


async def test_first_failure_raises_the_first_error_alone_once_the_other_tasks_have_ended():
    sibling = Stubborn("sibling", released=True)

    async def fails() -> None:
        await sibling.started.wait()
        raise OSError("the first failure")

    with pytest.raises(OSError, match="the first failure"):
        with first_failure():
            async with anyio.create_task_group() as group:
                group.start_soon(sibling.run)
                group.start_soon(fails)
    assert sibling.cleaned


async def test_first_failure_lets_a_cancellation_of_the_caller_go_up_rather_than_a_failure_it_caused():
    """A task group raises its tasks' failures in place of its caller's cancellation; a caller
    that catches them (a watch's follower logs an update that failed) would run on, and its
    stop would wait for it for ever."""

    async def fails_as_cancelled() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            raise OSError("failed while being cancelled")

    started = asyncio.Event()
    went_on: list[str] = []

    async def caller() -> None:
        try:
            with first_failure():
                async with anyio.create_task_group() as group:
                    group.start_soon(fails_as_cancelled)
                    started.set()
        except OSError:
            went_on.append("caught the failure")

    task = asyncio.create_task(caller())
    await _all_set([started])
    await cancel_and_wait(task)
    assert task.cancelled() and went_on == []


async def test_first_failure_counts_only_the_cancellations_made_meanwhile():
    """Python 3.11's asyncio.TaskGroup leaves a cancellation counted on its caller once one of
    its tasks failed; a later group's failure is still that failure, not a cancellation."""

    async def fails() -> None:
        raise OSError("a failure")

    with pytest.raises(ExceptionGroup):
        async with asyncio.TaskGroup() as group:
            group.create_task(fails())
    with pytest.raises(OSError, match="a failure"):
        with first_failure():
            async with anyio.create_task_group() as group:
                group.start_soon(fails)
