"""Appends to a leader keep their arrival order (an idempotent producer's sequences need it),
although some wait: one whose batch is checked in another thread first (compressed) takes a
turn, done once it appended or gave up, and the appends that arrive while a turn is not done
take turns after it.

Concurrency: owned by the partition's event loop.
"""

from __future__ import annotations

import asyncio


class AppendTurns:
    def __init__(self) -> None:
        self._last: asyncio.Future | None = None

    @property
    def busy(self) -> bool:
        """Whether an append's turn is not done: the next append must take a turn too."""
        return self._last is not None and not self._last.done()

    def take(self) -> Turn:
        """The next turn, to use as a context manager: it ends when the block does."""
        previous = self._last
        self._last = asyncio.get_running_loop().create_future()
        return Turn(self, previous, self._last)

    def _ended(self, turn: asyncio.Future) -> None:
        if self._last is turn and turn.done():
            self._last = None


class Turn:
    def __init__(self, turns: AppendTurns, previous: asyncio.Future | None, turn: asyncio.Future):
        self._turns = turns
        self._previous = previous
        self._turn = turn

    async def come(self) -> None:
        """Wait until every append that arrived before this one is done."""
        if self._previous is not None and not self._previous.done():
            await asyncio.shield(self._previous)  # our requester giving up must not cancel another's turn

    def __enter__(self) -> Turn:
        return self

    def __exit__(self, *exc_info) -> None:
        """Let the appends after this turn go: at once, or, if it gave up before its own turn
        came (its requester went away), once the one before it is done."""
        previous, turn = self._previous, self._turn
        if previous is None or previous.done():
            turn.set_result(None)
        else:
            previous.add_done_callback(lambda _: turn.set_result(None))
        self._turns._ended(turn)
