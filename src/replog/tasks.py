"""Background tasks' lifecycles: who starts them, who notices that they end, who stops them.

Tasks started and stopped in one scope (a function that starts several and waits for them, or
races them against a deadline) use anyio's task groups and cancel scopes directly. But anyio
cancels level-triggered: a task in a cancelled scope is cancelled again at each await until it
leaves, so a task whose cleanup awaits (a watch it closes, which waits for its reader to end)
stays in an asyncio.TaskGroup, which cancels once.

What is here serves the other kind: tasks a component starts in one method and stops in another
(`start` and `close`), which no cancel scope can span. Such a component keeps its tasks in a
`TaskOwner` (or, for a task or two of its own, stops them with `cancel_and_wait`).

Below every other module of replog (it imports none of them), so that the store backends, the
replicas and the broker all may use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

logger = logging.getLogger(__name__)


async def cancel_and_wait(*tasks: asyncio.Future) -> None:
    """Cancel `tasks` and wait until each has ended; their outcomes are not the caller's. A
    cancellation of the caller while it waits still reaches the caller: `except CancelledError`
    around an await of a task would swallow it, and the caller would go on as if never stopped."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def logging_failure(what: str) -> Callable[[asyncio.Task], None]:
    """A done-callback for a task that ends only when cancelled: anything else is a bug, logged."""

    def ended(task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.error("%s failed task=%s", what, task.get_name(), exc_info=task.exception())

    return ended


@contextlib.contextmanager
def first_failure() -> Iterator[None]:
    """Around a task group whose callers expect one error, as from `asyncio.gather`: the first
    of its tasks' failures, raised alone (a task group raises them all, grouped). Unless the
    caller was cancelled meanwhile: a task group then raises its tasks' failures in place of
    the cancellation, and a caller that catches them would run on as if never cancelled. The
    cancellations are counted from here, as anyio's cancel scopes count them: on Python 3.11 an
    asyncio.TaskGroup whose task failed leaves one counted for good."""
    task = asyncio.current_task()
    cancels_before = task.cancelling()
    try:
        yield
    except BaseExceptionGroup as failures:
        if task.cancelling() > cancels_before:
            raise asyncio.CancelledError from None
        raise failures.exceptions[0] from None


class TaskOwner:
    """The background tasks of one component, from its start to its close, each under a key
    (its name unless given one; several tasks may share a key and are stopped together). A
    task that ends with an exception is logged as it ends, not found out at close."""

    def __init__(self, what: str):
        self._failed = logging_failure(what)
        self._tasks: dict[str, set[asyncio.Task]] = {}  # running or just ended, by key

    def start(self, coroutine: Coroutine[Any, Any, None], name: str, key: str | None = None) -> asyncio.Task:
        key = name if key is None else key
        task = asyncio.create_task(coroutine, name=name)
        self._tasks.setdefault(key, set()).add(task)
        task.add_done_callback(lambda ended: self._ended(key, ended))
        return task

    def _ended(self, key: str, task: asyncio.Task) -> None:
        tasks = self._tasks.get(key)
        if tasks is not None:  # else stopped already
            tasks.discard(task)
            if not tasks:
                del self._tasks[key]
        self._failed(task)

    def keys(self) -> list[str]:
        return list(self._tasks)

    def running(self, key: str) -> bool:
        return any(not task.done() for task in self._tasks.get(key, ()))

    async def stop(self, *keys: str) -> None:
        """Cancel the tasks under `keys` and wait until each has ended."""
        await cancel_and_wait(*(task for key in keys for task in self._tasks.pop(key, ())))

    async def close(self) -> None:
        """Cancel every task and wait until each has ended."""
        await self.stop(*self._tasks)
