"""The leader's replication throttle for partition moves: Kafka's
leader.replication.throttled.rate, in bytes per second, on the bytes this broker sends to the
replicas that reassignments add (replication/reassignment.py sets which, per partition, from
the move's `throttle_bytes_per_s`), so that copying a partition to a new broker leaves room for
clients and for the followers already in sync, which are never throttled.

One bucket per broker, shared by every throttled partition it leads: tokens accrue at the rate,
up to one second's worth, and a read spends what it sent. A read goes ahead while the balance
is positive and may overdraw it by one batch (batches are never split); the next reads wait for
the debt to be paid back, so the average holds. The clock is the caller's (monotonic ms).
"""

from __future__ import annotations


class ReplicationThrottle:
    def __init__(self) -> None:
        self._tokens_bytes = 0.0
        self._updated_ms: int | None = None

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
