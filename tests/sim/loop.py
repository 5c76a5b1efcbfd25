"""A deterministic asyncio event loop for the simulator: virtual time, no threads, and brokers
that can be paused or killed.

Virtual time: `time()` is a manual clock. When no callback is ready the loop would block in its
selector until the next timer; the selector here never blocks, it moves the clock forward by
the timeout the loop asked for, so the next timer is due at once. A loop with nothing ready and
no timer would wait forever: that is a deadlock of the simulated system, and raised as one.

No threads: `run_in_executor` (and so `asyncio.to_thread`) runs the function inline and returns
a finished future, so disk work happens at a point of the schedule, not at the mercy of the OS.

Ordering stays asyncio's: ready callbacks run first in, first out (the code under test relies on
it). What varies between schedules are the delays the simulation draws from its seeded random
generator, never the loop itself, so one seed gives the same schedule every time.

Owners: every callback scheduled from a context where `OWNER` is set belongs to that broker
(a task's steps, its timers and the callbacks of futures it awaits all carry the context the
task was started in). A paused owner's callbacks are held back and run, in order, when it
resumes (SIGSTOP and SIGCONT); a crashed owner's are dropped for good (SIGKILL: its tasks never
run again, its files stay as written).
"""

from __future__ import annotations

import asyncio
import contextvars
import selectors
from collections.abc import Callable
from typing import Any

# The simulated broker the current context belongs to (None: the harness itself).
OWNER: contextvars.ContextVar[Any] = contextvars.ContextVar("sim_owner", default=None)

START_S = 1_000_000.0  # virtual time at start: far from zero, as a monotonic clock is


class Deadlock(RuntimeError):
    """Nothing is ready and no timer is set: every task of the simulation waits forever."""


class Owner:
    """What the loop needs to know of a simulated broker to hold or drop its callbacks. Made
    while its loop runs."""

    def __init__(self) -> None:
        self.paused = False
        self.crashed = False
        self._held: list[tuple[asyncio.Handle, Callable, tuple, contextvars.Context]] = []
        self._loop = asyncio.get_running_loop()
        self.context = contextvars.copy_context()
        self.context.run(OWNER.set, self)

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        held, self._held = self._held, []
        loop = asyncio.get_running_loop()
        for handle, callback, args, context in held:  # in the order they became due
            loop.call_soon(_unless_cancelled, handle, callback, *args, context=context)

    def crash(self) -> None:
        # Its tasks never run again, and never end; kept by the loop, they are never collected
        # either. Collecting a pending task closes its coroutine, which runs its finally blocks
        # and `async with` exits (a watch unregistering itself while the store iterates that
        # very registry to notify it, say) at whatever moment the garbage collector picks, and
        # so the history of the process would decide the schedule.
        self._loop.abandoned.extend(asyncio.all_tasks(self._loop))
        self.crashed = True
        self._held = []

    def hold(self, handle: asyncio.Handle, callback: Callable, args: tuple, context: contextvars.Context) -> None:
        self._held.append((handle, callback, args, context))


def _unless_cancelled(handle: asyncio.Handle, callback: Callable, *args: Any) -> None:
    """Run a held callback unless its handle was cancelled meanwhile, even by a callback held
    before it (a task leaving `asyncio.timeout` cancels its timer): asyncio never runs a
    cancelled handle."""
    if not handle.cancelled():
        callback(*args)


class _Gate:
    """The callback the loop runs in place of an owner's: it runs it, holds it or drops it.
    It knows its own handle, so that one cancelled while held is not run on resume."""

    def __init__(self, owner: Owner, context: contextvars.Context, callback: Callable, args: tuple):
        self.owner, self.context, self.callback, self.args = owner, context, callback, args
        self.handle: asyncio.Handle | None = None

    def __call__(self) -> None:
        if self.owner.crashed:
            return
        if self.owner.paused:
            self.owner.hold(self.handle, self.callback, self.args, self.context)
            return
        self.callback(*self.args)


class _VirtualSelector(selectors.BaseSelector):
    """Registers what the loop asks (its self-pipe) and never waits: `select` advances the
    clock by the timeout instead."""

    def __init__(self, advance: Callable[[float], None]):
        self._advance = advance
        self._keys: dict[Any, selectors.SelectorKey] = {}

    def register(self, fileobj, events, data=None) -> selectors.SelectorKey:
        key = selectors.SelectorKey(fileobj, fileobj if isinstance(fileobj, int) else fileobj.fileno(), events, data)
        self._keys[fileobj] = key
        return key

    def unregister(self, fileobj) -> selectors.SelectorKey:
        return self._keys.pop(fileobj)

    def select(self, timeout: float | None = None) -> list:
        if timeout is None:
            raise Deadlock("no callback ready and no timer set")
        self._advance(timeout)
        return []

    def get_map(self):
        return self._keys

    def close(self) -> None:
        self._keys.clear()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self, after_step: Callable[[], None] | None = None):
        self._now = START_S
        super().__init__(_VirtualSelector(self._advance))
        self.after_step = after_step  # called after every iteration: the invariants
        self.abandoned: list[asyncio.Task] = []  # pending when an owner crashed (see Owner.crash)

    def _advance(self, seconds: float) -> None:
        self._now += max(seconds, 0.0)

    def time(self) -> float:
        return self._now

    def call_soon(self, callback, *args, context=None):
        context = contextvars.copy_context() if context is None else context
        owner = context.get(OWNER)
        if owner is None:
            return super().call_soon(callback, *args, context=context)
        gate = _Gate(owner, context, callback, args)
        gate.handle = super().call_soon(gate, context=context)
        return gate.handle

    def call_at(self, when, callback, *args, context=None):
        context = contextvars.copy_context() if context is None else context
        owner = context.get(OWNER)
        if owner is None:
            return super().call_at(when, callback, *args, context=context)
        gate = _Gate(owner, context, callback, args)
        gate.handle = super().call_at(when, gate, context=context)
        return gate.handle

    def run_in_executor(self, executor, func, *args):
        future = self.create_future()
        try:
            future.set_result(func(*args))
        except Exception as error:
            future.set_exception(error)
        return future

    def _run_once(self) -> None:
        super()._run_once()
        if self.after_step is not None:
            self.after_step()
