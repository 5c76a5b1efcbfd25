"""What a leader knows of one follower replica (Kafka's Replica.scala): its log end as of its
last fetch, when it was last caught up, and the fetch session holding the partition quiet for it.

Concurrency: owned by the partition's event loop.
"""

from collections.abc import Iterable, Iterator
from typing import NamedTuple, Protocol

from replog.replica.results import UNKNOWN_OFFSET


class QuietHold(Protocol):
    """A follower's fetch session that holds a partition quiet (net/fetch_sessions.py): the
    partition is caught up for that follower with nothing new to tell it, so the session neither
    reads it nor asks about it, and each of its requests counts as the follower's fetch at the
    log end, at `fetched_ms`. The partition ends the hold (`stirred`) when anything the follower
    could learn changes; `wake`: the change gave it something to read, which a parked request of
    the session should answer at once, as it would for a partition it reads."""

    @property
    def fetched_ms(self) -> int: ...

    def stirred(self, wake: bool) -> None: ...


class QuietSnapshot(NamedTuple):
    """What a leader's in-sync follower has and could learn (Partition.quiet_snapshot)."""

    leader_epoch: int
    follower_end_offset: int  # as of its last fetch
    log_end_offset: int
    told: tuple[int, int, int]  # high watermark, last stable offset, log start


class FollowerReplica:
    """What the leader knows of a remote replica: its LEO as of its last fetch, and when it was
    last caught up with the leader's LEO (Kafka's lastCaughtUpTimeMs, against replica.lag.time.max.ms).
    While a fetch session holds the partition quiet for it (`quiet`), its fetches are recorded
    when read (`credited`), not at each request."""

    __slots__ = ("broker_id", "log_end_offset", "last_caught_up_ms", "last_fetch_ms", "leader_end_at_last_fetch",
                 "fetched_at_leader_epoch", "quiet")

    def __init__(self, broker_id: int, now_ms: int):
        self.broker_id = broker_id
        self.log_end_offset = UNKNOWN_OFFSET  # unknown until it fetches: holds the HW back
        # A new follower gets a full lag period before it counts as out of sync, as in Kafka.
        self.last_caught_up_ms = now_ms
        self.last_fetch_ms = now_ms
        self.leader_end_at_last_fetch = UNKNOWN_OFFSET
        self.fetched_at_leader_epoch = False  # it has fetched from this leadership, naming its epoch
        self.quiet: QuietHold | None = None

    def record_fetch(self, fetch_offset: int, leader_end_offset: int, now_ms: int) -> None:
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.leader_end_at_last_fetch >= 0:
            # It has now what the leader had at its previous fetch: caught up as of then.
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_ms = now_ms
        self.leader_end_at_last_fetch = leader_end_offset

    def lost_committed_records(self, high_watermark: int) -> bool:
        """It fetched at this epoch from below the HW: a replica in sync holds everything below
        it, so this one came back without records (a machine restart lost its unflushed writes,
        unclean_reboot.py). It has taken itself out of the store's ISR; the leader learns it
        here, and its shrink, finding the ISR changed, fences it so the partition elects again."""
        return self.fetched_at_leader_epoch and 0 <= self.log_end_offset < high_watermark

    def credited(self) -> "FollowerReplica":
        """Itself, with the requests of a session that holds the partition quiet for it recorded
        as its fetches: at the log end, which a hold outlives no append."""
        hold = self.quiet
        if hold is not None and hold.fetched_ms > self.last_fetch_ms:
            self.record_fetch(self.log_end_offset, self.log_end_offset, hold.fetched_ms)
        return self

    def release(self, stirred: bool, wake: bool = False) -> None:
        """The hold ends, its requests credited; `stirred`: by a change on the partition's side,
        which the session hears of (QuietHold.stirred)."""
        hold = self.quiet
        self.credited()
        self.quiet = None
        if stirred:
            hold.stirred(wake)


class Followers(dict[int, FollowerReplica]):
    """A leader's followers, by broker id, and the fetch sessions holding the partition quiet
    for them."""

    def stir(self, wake: bool) -> None:
        """Something a quiet follower could learn changed (the log end, the high watermark, the
        log start, the ISR, the assignment, the leadership): every hold ends, its fetches so far
        recorded as at the log end it was held at, and its session reads the partition again."""
        for follower in self.values():  # bounded by the replication factor
            if follower.quiet is not None:
                follower.release(stirred=True, wake=wake)

    def lags(self, end_offset: int, log_start_offset: int, now_ms: int) -> Iterator[tuple[int, int, int]]:
        for follower in self.values():  # bounded by the replication factor
            follower.credited()
            behind = end_offset - max(follower.log_end_offset, log_start_offset)
            yield follower.broker_id, max(behind, 0), max(now_ms - follower.last_caught_up_ms, 0)

    def hold_quiet(self, replica_id: int, hold: QuietHold) -> None:
        """`hold` holds the partition quiet for `replica_id` from now on, its session having
        found it caught up with nothing to learn (Partition.quiet_snapshot)."""
        follower = self[replica_id]
        if follower.quiet is not None and follower.quiet is not hold:
            follower.release(stirred=True)  # another session's (an earlier connection's): it reads it again
        follower.quiet = hold

    def release_quiet(self, replica_id: int, hold: QuietHold) -> None:
        """`hold`'s session no longer holds the partition quiet (it closed, forgot the partition,
        or asks at another offset): its requests so far are recorded as the follower's fetches."""
        follower = self.get(replica_id)
        if follower is not None and follower.quiet is hold:
            follower.release(stirred=False)

    def forget_fetches(self, brokers: Iterable[int]) -> None:
        for broker in brokers:
            follower = self.get(broker)
            if follower is not None:
                if follower.quiet is not None:
                    follower.release(stirred=True)
                follower.fetched_at_leader_epoch = False
