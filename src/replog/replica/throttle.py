"""The leader's replication throttle for partition moves: Kafka's
leader.replication.throttled.rate, in bytes per second, on the bytes this broker sends to the
replicas that reassignments add (replication/reassignment.py sets which, per partition), so that
copying a partition to a new broker leaves room for clients and for the followers already in
sync, which are never throttled. The rate is the lower of the move's own
(`throttle_bytes_per_s`, `replog reassign execute --throttle` through the store) and this
broker's configured leader.replication.throttled.rate (a dynamic broker config, the way
through a broker and Kafka's own tool; replication/throttle_rates.py keeps it current).

One bucket per broker, shared by every throttled partition it leads: tokens accrue at the rate,
up to one second's worth, and a read spends what it sent. A read goes ahead while the balance
is positive and may overdraw it by one batch (batches are never split); the next reads wait for
the debt to be paid back, so the average holds. The clock is the caller's (monotonic ms).
"""

from __future__ import annotations

from replog.storage.log import Log
from replog.storage.segment import FileSlice


class ReplicationThrottle:
    def __init__(self) -> None:
        self._tokens_bytes = 0.0
        self._updated_ms: int | None = None
        self.configured_rate_bytes_per_s: int | None = None  # None: not configured

    def rate_bytes_per_s(self, move_rate_bytes_per_s: int | None) -> int | None:
        """The rate for a move's replicas: the lower of the move's and the configured; None if
        neither is set."""
        rates = [rate for rate in (move_rate_bytes_per_s, self.configured_rate_bytes_per_s) if rate is not None]
        return min(rates) if rates else None

    def allowance_bytes(self, rate_bytes_per_s: int, now_ms: int) -> int:
        """How many bytes may go now at `rate_bytes_per_s`: 0 while in debt."""
        if self._updated_ms is not None:
            accrued = rate_bytes_per_s * max(0, now_ms - self._updated_ms) / 1000
            self._tokens_bytes = min(self._tokens_bytes + accrued, float(rate_bytes_per_s))
        else:
            self._tokens_bytes = float(rate_bytes_per_s)
        self._updated_ms = now_ms
        return max(0, int(self._tokens_bytes))

    def spent(self, size_bytes: int) -> None:
        self._tokens_bytes -= size_bytes


class ThrottledReplicas:
    """One partition's replicas whose fetches draw on a throttle: the replicas a move adds, at
    the lower of the move's rate and the broker's configured one (read at each fetch, so that a
    rate set or removed applies at once)."""

    __slots__ = ("replicas", "throttle", "move_rate_bytes_per_s")

    def __init__(self, replicas: frozenset[int], throttle: ReplicationThrottle, move_rate_bytes_per_s: int | None):
        self.replicas = replicas
        self.throttle = throttle
        self.move_rate_bytes_per_s = move_rate_bytes_per_s

    def allowance_bytes(self, replica_id: int, isr: frozenset[int], now_ms: int) -> int | None:
        """What `replica_id` may fetch now; None if it is not throttled. As Kafka: a throttled
        replica that joined the ISR is not throttled, or acks=all would wait on the throttle."""
        if replica_id not in self.replicas or replica_id in isr:
            return None
        rate_bytes_per_s = self.throttle.rate_bytes_per_s(self.move_rate_bytes_per_s)
        return None if rate_bytes_per_s is None else self.throttle.allowance_bytes(rate_bytes_per_s, now_ms)

    def read(self, log: Log, replica_id: int, isr: frozenset[int], fetch_offset: int, max_bytes: int, now_ms: int,
             min_one_message: bool) -> list[FileSlice]:
        """A follower's read of `log` (Log.read), within what the throttle allows `replica_id` now."""
        allowance_bytes = self.allowance_bytes(replica_id, isr, now_ms)
        if allowance_bytes is None:
            return log.read(fetch_offset, max_bytes, min_one_message=min_one_message)
        if not allowance_bytes:
            return []
        slices = log.read(fetch_offset, min(max_bytes, allowance_bytes), min_one_message=min_one_message)
        self.throttle.spent(sum(piece.size_bytes for piece in slices))
        return slices
