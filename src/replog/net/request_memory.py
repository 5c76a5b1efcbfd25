"""The memory of requests being read or waiting for their answer, over all of a server's
connections: bounded by `queued.max.request.bytes`, as Kafka's memory pool bounds it.

What a connection holds here (framing.py keeps the accounts):

- a request from the moment it is decoded until its answer is written (or it ends without
  one): its frame's size;
- its receive buffer's capacity past `BASELINE_BYTES`. Up to that much, a connection's buffer is
  free: a frame no bigger always gets room, so small requests (metadata, fetches, heartbeats,
  offset commits) are read whatever big ones hold.

A grant is Kafka's non-strict one: given while any memory is left, so the bytes in use pass the
limit by at most the last grant; one that is refused leaves the connection waiting, its reading
paused, and connections are woken in the order they began to wait as memory comes back. A frame
bigger than a connection's buffer reserves, before the buffer grows for it, both that growth and
its decoded request's size, so that once read it never waits for memory again: memory held by
partly read frames always comes back (as their frames complete, or as connections.max.idle.ms
closes senders that stop), and no set of connections can wait on each other.

Also the server's one receive buffer that connections with no partial frame read into
(`scratch`): an idle connection, or one whose requests each arrive in one read, holds no receive
memory of its own. Reads into it are synchronous (get_buffer, the read, buffer_updated), so one
buffer serves every connection of the event loop.
"""

from __future__ import annotations

from collections.abc import Callable

# A connection's receive buffer up to this size costs nothing from the pool; also the size of
# the shared read buffer, hence the most one read takes from a socket that has no partial frame.
BASELINE_BYTES = 64 * 1024


class RequestMemory:
    def __init__(self, limit_bytes: int):
        self.limit_bytes = limit_bytes
        self.used_bytes = 0
        self.scratch = bytearray(BASELINE_BYTES)
        # Who waits for memory, in the order they began to, and how each is woken; bounded by
        # the connections.
        self._waiting: dict[object, Callable[[], None]] = {}
        self._waking = False

    @property
    def exhausted(self) -> bool:
        return self.used_bytes >= self.limit_bytes

    def try_take(self, size_bytes: int) -> bool:
        """Take `size_bytes` if any memory is left (Kafka's non-strict grant)."""
        if self.exhausted:
            return False
        self.used_bytes += size_bytes
        return True

    def take(self, size_bytes: int) -> None:
        """Count bytes a connection holds whatever the pool says (a request it may always have)."""
        self.used_bytes += size_bytes

    def give_back(self, size_bytes: int) -> None:
        self.used_bytes -= size_bytes
        if self._waiting and not self.exhausted:
            self._wake()

    def wait(self, waiter: object, wake: Callable[[], None]) -> None:
        """Have `wake` called once memory is left and the waiters before `waiter` were woken."""
        self._waiting.setdefault(waiter, wake)

    def stop_waiting(self, waiter: object) -> None:
        self._waiting.pop(waiter, None)

    def _wake(self) -> None:
        if self._waking:
            return  # a connection woken below gave memory back: the loop below goes on
        self._waking = True
        try:
            for _ in range(len(self._waiting)):  # each waiter once: one woken may wait again, behind the others
                if self.exhausted or not self._waiting:
                    break
                waiter = next(iter(self._waiting))
                self._waiting.pop(waiter)()
        finally:
            self._waking = False
