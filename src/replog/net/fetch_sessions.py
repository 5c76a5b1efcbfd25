"""Fetch sessions (KIP-227): a fetcher names its partitions once, in a full
fetch that opens a session, and from then on sends only what changed (an incremental fetch: the
partitions whose fetch offset, epoch or size moved, and those it forgets); the leader answers
only the partitions with something to say (records, an error, or a high watermark, last stable
offset or log start other than the session last told). A follower of thousands of idle
partitions otherwise sent, and its leader decoded, read and answered, all of them every round,
while a large topic was created and while they sat idle.

Kafka's leader still reads every partition of a session each round, since a follower's fetch is
what keeps it in the ISR. replog's does not touch the quiet ones: a partition whose last read
found its in-sync follower at the log end, with nothing to tell but what the session told (the
session compares Partition.quiet_snapshot with what it answered), is held quiet by the session
(Followers.hold_quiet): each later request of the session counts as the follower's fetch of it,
recorded when the leader next looks at the follower's times (replica/followers.py's QuietHold),
and the request neither reads, answers nor even visits it. Anything that could give the
follower something to learn (an append, a new high watermark or log start,
a leadership, ISR or assignment change) ends the hold at once (QuietHold.stirred): the
partition is read again, and an append or a leadership change wakes the session's parked
request, as a watch on the partition would. Reading idle partitions for their followers,
or even asking each whether it was still quiet every round, cost a leader of thousands of them
a steady share of a core; a round now costs what its partitions with news cost.

Epochs order a session's requests: each must carry the epoch after the previous one's, or is
refused with INVALID_FETCH_SESSION_EPOCH. replog's followers have up to two rounds in flight on
a connection (net/fetch_rounds.py), so a session serves its requests one at a time, in order:
the later request overtakes a parked one (net/framing.py), which then answers at once.

The cache is bounded: SESSION_SLOTS sessions (Kafka's max.incremental.fetch.session.cache.slots),
and PARTITIONS_MAX cached partitions in all. A new session takes the slot of the one least
recently used if that one sat idle for EVICTABLE_IDLE_S (Kafka's
min.incremental.fetch.session.eviction.ms), or if the newcomer is a follower and it a consumer
(followers are privileged, as in Kafka); otherwise it is declined, and the fetch is answered as
a full fetch outside any session (session id 0), which every client handles.

The fetcher's side (FetcherSession, one per connection of a follower to a leader) keeps what the
leader's session holds: the partitions at the offsets last sent, and what the leader last told
of each, which stands for the partitions an incremental answer leaves out (`last_told`). It
finds what changed from the round's own changes (net/fetch_rounds.py) when the round before is
the last it sent, and by comparing every partition otherwise. A session error
(an unknown session, an epoch out of order) ends the session: that round goes again outside any
session, and the next opens a new one, closing the old.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any, NamedTuple, Protocol

from kio.schema.errors import ErrorCode

from replog.replica.followers import Followers, QuietSnapshot
from replog.replication.fetcher import FetchSpec

from .fetch_decoding import FetchedPartition
from .fetch_rounds import RoundChanges

# KIP-227's session epochs: 0 opens a session (closing the one named, if any), -1 fetches
# outside any (closing the one named, if any); the rest count a session's requests from 1 on.
INITIAL_EPOCH, FINAL_EPOCH = 0, -1
NO_SESSION_ID = 0
NO_TOPIC_ID = uuid.UUID(int=0)
SESSION_SLOTS = 1000
EVICTABLE_IDLE_S = 120.0
# Cached partitions in all sessions: a session of a follower of every partition of a broker of
# 10,000 is 10,000; each costs a few hundred bytes.
PARTITIONS_MAX = 1_000_000

# (how the request names the topic: its name, or its id from version 13 on, partition index)
SessionKey = tuple[Any, int]


class QuietPartition(Protocol):
    """replica/partition.py's Partition, as a session holds it quiet for a follower."""

    followers: Followers

    def quiet_snapshot(self, replica_id: int) -> QuietSnapshot | None: ...



class _Cached:
    """One partition of a session: the request's fields for it, what the last answer that
    carried it told, and the replica holding it quiet, if any (replica/followers.py's QuietHold)."""

    __slots__ = ("session", "key", "fetch", "told", "held_by")

    def __init__(self, session: FetchSession, key: SessionKey, fetch: object):
        self.session = session
        self.key = key
        self.fetch = fetch  # the request's partition: partition, fetch_offset, partition_max_bytes...
        self.told: tuple[int, int, int] | None = None  # (high watermark, last stable offset, log start)
        self.held_by: QuietPartition | None = None

    @property
    def fetched_ms(self) -> int:
        return self.session.fetched_ms

    def stirred(self, wake: bool) -> None:
        self.held_by = None
        self.session.unquiet[self.key] = self
        if wake and self.session.parked is not None:
            self.session.parked.wake()

    def release(self) -> None:
        if self.held_by is not None:
            self.held_by.followers.release_quiet(self.session.replica_id, self)
            self.held_by = None


class FetchSession:
    __slots__ = ("id", "epoch", "by_id", "replica_id", "partitions", "unquiet", "fetched_ms", "parked", "used_at_s",
                 "turn", "closed")

    def __init__(self, session_id: int, by_id: bool, replica_id: int, now_s: float):
        self.id = session_id
        self.epoch = 1  # the epoch the next request must carry
        self.by_id = by_id  # whether its requests name topics by id (version 13 on)
        self.replica_id = replica_id  # the follower's, -1 for a consumer's
        self.partitions: dict[SessionKey, _Cached] = {}  # in the order they are read and answered
        self.unquiet: dict[SessionKey, _Cached] = {}  # those not held quiet: what a request reads
        self.fetched_ms = 0  # when the latest request that counts as the follower's fetch came
        self.parked: Waker | None = None  # the long poll of the request parked now, if any
        self.used_at_s = now_s
        self.turn: asyncio.Future | None = None  # the end of the latest request's turn (FetchSessions._turn_of)
        self.closed = False

    @property
    def by_follower(self) -> bool:
        return self.replica_id >= 0

    def add(self, key: SessionKey, fetch: object) -> None:
        cached = self.partitions.get(key)
        if cached is None:
            cached = self.partitions[key] = _Cached(self, key, fetch)
        else:
            cached.release()
            cached.fetch = fetch
        self.unquiet[key] = cached

    def forget(self, key: SessionKey) -> None:
        cached = self.partitions.pop(key, None)
        if cached is not None:
            cached.release()
            self.unquiet.pop(key, None)

    def close(self) -> None:
        self.closed = True
        for cached in self.partitions.values():  # bounded by PARTITIONS_MAX
            cached.release()


class Waker(Protocol):
    def wake(self) -> None: ...


class SessionFetch:
    """What one request reads, and which partitions its answer carries."""

    def __init__(self, session: FetchSession | None, full: bool, topics: list[tuple[Any, list[object]]]):
        self.session = session  # None: outside any session
        self.full = full  # every partition read is answered
        self._topics = topics
        self._may_hold = False  # whether this request's fetches may hold partitions quiet

    @property
    def session_id(self) -> int:
        return NO_SESSION_ID if self.session is None else self.session.id

    def to_read(self, replica_id: int, now_ms: int, *, record: bool) -> list[tuple[Any, list[object]]]:
        """The partitions to read, as a request's topics: in an incremental fetch, those the
        session does not hold quiet, each of which `record` (at the request's first read) counts
        as the follower's fetch. `replica_id`: the follower whose fetches the request's count
        as, -1 if none (a consumer's, or one from a life of its broker other than the registered
        one): then nothing is held quiet."""
        session = self.session
        self._may_hold = session is not None and replica_id >= 0 and replica_id == session.replica_id
        if session is not None and session.by_follower and not self._may_hold:
            for cached in session.partitions.values():  # bounded by PARTITIONS_MAX
                if cached.held_by is not None:
                    cached.release()
                    session.unquiet[cached.key] = cached
        elif session is not None and record:
            session.fetched_ms = now_ms
        if self.full:
            return self._topics
        topics: list[tuple[Any, list[object]]] = []
        for (topic, _), cached in session.unquiet.items():
            if not topics or topics[-1][0] != topic:
                topics.append((topic, []))
            topics[-1][1].append(cached.fetch)
        return topics

    @contextlib.contextmanager
    def parked(self, waker: Waker) -> Iterator[None]:
        """While the request's long poll waits: a partition the session holds quiet that gets
        something to read wakes it (QuietHold.stirred)."""
        if self.session is None:
            yield
            return
        self.session.parked = waker
        try:
            yield
        finally:
            self.session.parked = None

    def answered(self, wire_topic: Any, index: int, told: tuple[int, int, int] | None, has_records: bool,
                 quiet: QuietPartition | None) -> bool:
        """Whether the answer of a fetch in a session carries the partition read: in a full
        fetch all; in an incremental one those with records, an error (`told` None) or news. A carried
        partition's `told` is what the session told it; one with records goes to the back of
        the session, so that a round's byte budget reaches the others next (KIP-227's
        rotation). `quiet`: the replica, if the read found its follower caught up; the session
        holds it quiet from now on if the replica agrees there is nothing to tell but `told`."""
        session = self.session
        key = (wire_topic, index)
        cached = session.partitions.get(key)
        if cached is None:  # forgotten while this request waited: a later request's doing
            return self.full
        carried = self.full or has_records or told is None or told != cached.told
        if carried:
            cached.told = told
            if has_records:
                session.partitions[key] = session.partitions.pop(key)
                session.unquiet[key] = session.unquiet.pop(key, cached)
        if (quiet is not None and told is not None and self._may_hold and not session.closed and cached.held_by is None
                and _nothing_to_learn(quiet.quiet_snapshot(session.replica_id), cached.fetch, told)):
            quiet.followers.hold_quiet(session.replica_id, cached)
            cached.held_by = quiet
            session.unquiet.pop(key, None)
        return carried


def _nothing_to_learn(snapshot: QuietSnapshot | None, fetch: Any, told: tuple[int, int, int]) -> bool:
    """Whether the follower, as the leader's partition sees it now (`snapshot`), fetched at this
    leadership's epoch from the log end, as it had, and was told what there is to tell: then
    the partition may be held quiet for it until something changes."""
    return snapshot is not None and snapshot == (fetch.current_leader_epoch, fetch.fetch_offset, fetch.fetch_offset,
                                                 told)


class FetchSessions:
    """A broker's fetch sessions. See the module docstring."""

    def __init__(self, clock_s: Callable[[], float] = time.monotonic, slots: int = SESSION_SLOTS,
                 partitions_max: int = PARTITIONS_MAX):
        self._clock_s = clock_s
        self._slots = slots
        self._partitions_max = partitions_max
        self._sessions: collections.OrderedDict[int, FetchSession] = collections.OrderedDict()  # least recently used first
        self._cached_partitions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def cached_partitions(self) -> int:
        return self._cached_partitions

    @contextlib.asynccontextmanager
    async def fetch(self, body: Any, by_id: bool) -> AsyncIterator[SessionFetch | ErrorCode]:
        """The reads of one Fetch request `body` (v7 on; `by_id`: v13 on, naming topics by id),
        or the error that refuses it whole; held for the request's whole life, so that the
        session's next request waits for it."""
        session_id, epoch = body.session_id, body.session_epoch
        requested = requested_topics(body)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != NO_SESSION_ID:
                self._close(session_id)
            session = self._open(requested, by_id, body.replica_id) if epoch == INITIAL_EPOCH else None
            async with self._turn_of(session):
                yield SessionFetch(session, True, requested)
            return
        session = self._sessions.get(session_id)
        if session is None:
            yield ErrorCode.fetch_session_id_not_found
            return
        async with self._turn_of(session):
            if self._sessions.get(session_id) is not session:  # evicted or closed while waiting
                yield ErrorCode.fetch_session_id_not_found
                return
            if epoch != session.epoch:
                yield ErrorCode.invalid_fetch_session_epoch
                return
            if session.by_id != by_id:
                yield ErrorCode.fetch_session_topic_id_error
                return
            session.epoch = _next_epoch(epoch)
            self._sessions.move_to_end(session_id)
            session.used_at_s = self._clock_s()
            if not self._update(session, requested, body.forgotten_topics_data):
                self._close(session_id)
                yield ErrorCode.fetch_session_id_not_found  # it outgrew the cache: the fetcher starts over
                return
            yield SessionFetch(session, False, [])

    @staticmethod
    @contextlib.asynccontextmanager
    async def _turn_of(session: FetchSession | None) -> AsyncIterator[None]:
        """The session's requests one at a time, in the order they came: each waits for the
        one before it to end."""
        if session is None:
            yield
            return
        before = session.turn
        turn = session.turn = asyncio.get_running_loop().create_future()
        try:
            if before is not None:
                await asyncio.shield(before)
            yield
        finally:
            if before is None or before.done():
                _end(turn)
            else:  # cancelled while waiting: the next still waits for the one before
                before.add_done_callback(lambda _: _end(turn))

    def _open(self, requested: list[tuple[Any, list[object]]], by_id: bool, replica_id: int) -> FetchSession | None:
        count = sum(len(partitions) for _, partitions in requested)
        if count == 0 or count > self._partitions_max:
            return None
        now_s = self._clock_s()
        while len(self._sessions) >= self._slots or self._cached_partitions + count > self._partitions_max:
            evictable = self._evictable(now_s, replica_id >= 0)
            if evictable is None:
                return None
            self._close(evictable)
        session_id = self._new_id()
        session = self._sessions[session_id] = FetchSession(session_id, by_id, replica_id, now_s)
        for topic, partitions in requested:
            for fetch in partitions:
                session.add((topic, fetch.partition), fetch)
        self._cached_partitions += len(session.partitions)
        return session

    def _evictable(self, now_s: float, by_follower: bool) -> int | None:
        for session in self._sessions.values():  # least recently used first
            if now_s - session.used_at_s >= EVICTABLE_IDLE_S or (by_follower and not session.by_follower):
                return session.id
        return None

    def _new_id(self) -> int:
        while True:
            session_id = random.randint(1, 0x7FFFFFFF)
            if session_id not in self._sessions:
                return session_id

    def _update(self, session: FetchSession, requested: Iterable[tuple[Any, list[object]]],
                forgotten: Iterable[Any]) -> bool:
        """Apply an incremental request's changes; False if the session would outgrow the cache."""
        before = len(session.partitions)
        for topic in forgotten:
            wire_topic = _named(topic)
            for index in topic.partitions:
                session.forget((wire_topic, index))
        for topic, partitions in requested:
            for fetch in partitions:
                session.add((topic, fetch.partition), fetch)
        self._cached_partitions += len(session.partitions) - before
        return self._cached_partitions <= self._partitions_max

    def _close(self, session_id: int) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.close()
            self._cached_partitions -= len(session.partitions)


def requested_topics(body: Any) -> list[tuple[Any, list[object]]]:
    """A Fetch request's topics as (topic as named: its name, or from version 13 on its id,
    [partition])."""
    return [(_named(topic), list(topic.partitions)) for topic in body.topics]


def _named(topic: Any) -> str | uuid.UUID:
    """How a request's topic (or forgotten topic) names it; kio reads the zero id as None."""
    return (topic.topic_id or NO_TOPIC_ID) if hasattr(topic, "topic_id") else topic.topic


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


def _end(turn: asyncio.Future) -> None:
    if not turn.done():
        turn.set_result(None)


# -- the fetcher's side --------------------------------------------------------------------------

# A session answer's own error that ends the session: its fetcher fetches again outside it.
SESSION_ERRORS = frozenset({ErrorCode.fetch_session_id_not_found.value, ErrorCode.invalid_fetch_session_epoch.value,
                            ErrorCode.fetch_session_topic_id_error.value})


class SessionRequest(NamedTuple):
    """One request of a fetcher's session, as sent."""

    session_id: int
    epoch: int
    specs: list[FetchSpec]  # every partition the round asks for
    sent: list[FetchSpec]  # those the request names: all in a full fetch, the changed ones in an incremental
    forgotten: list[FetchSpec]
    by_id: bool
    generation: int  # the session's incarnation it was sent in, or OUTSIDE_SESSION


OUTSIDE_SESSION = -1


class FetcherSession:
    """A follower's side of its session with one leader, on one connection: which partitions the
    leader's session holds, at what fetch offsets, and what it last told of each; see the
    module docstring. Requests are made (`request`) in the order they go on the wire, and their
    answers read (`answered`) in the order they come back."""

    def __init__(self):
        self._id = NO_SESSION_ID
        self._epoch = INITIAL_EPOCH  # the next request's
        self._by_id = False
        self._sent: dict[SessionKey, FetchSpec] = {}  # as the leader's session holds them
        self._known: dict[SessionKey, FetchedPartition] = {}  # what the leader last told of each
        self._opening = False  # a full fetch opening the session is out: others go outside any
        self._generation = 0
        self._closing_id = NO_SESSION_ID  # a session to close with the next opening fetch
        self._base: object | None = None  # the round whose request the session sent last (RoundChanges)

    def request(self, specs: list[FetchSpec], by_id: bool, changes: RoundChanges | None = None) -> SessionRequest:
        """The request asking for `specs`; `changes`: how they differ from the round before
        (FetchRounds), which spares comparing every partition when that round's request is the
        last one the session sent."""
        base, self._base = self._base, None
        if self._opening:
            return outside_session(specs, by_id)
        if changes is not None:
            self._base = changes.token
        if self._id == NO_SESSION_ID or by_id != self._by_id:
            closing = self._id or self._closing_id
            self._closing_id = NO_SESSION_ID
            self._reset()
            self._opening, self._by_id = True, by_id
            self._sent = {_key(spec, by_id): spec for spec in specs}
            return SessionRequest(closing, INITIAL_EPOCH, specs, specs, [], by_id, self._generation)
        changed: list[FetchSpec] = []
        forgotten: list[FetchSpec] = []
        from_last_round = changes is not None and base is not None and changes.base is base
        if from_last_round:
            for spec in changes.removed:  # bounded by the partitions followed from this leader
                self._forget(_key(spec, by_id), forgotten)
            for spec in changes.added:  # bounded by the partitions followed from this leader
                self._ask(spec, by_id, changed)
        if not from_last_round or len(self._sent) != len(specs):
            self._compare(specs, by_id, changed, forgotten)
        epoch, self._epoch = self._epoch, _next_epoch(self._epoch)
        return SessionRequest(self._id, epoch, specs, changed, forgotten, by_id, self._generation)

    def _compare(self, specs: list[FetchSpec], by_id: bool, changed: list[FetchSpec], forgotten: list[FetchSpec]) -> None:
        """What changed, found by comparing every asked partition with what was sent."""
        asked = set()
        for spec in specs:  # bounded by the partitions followed from this leader
            asked.add(self._ask(spec, by_id, changed))
        for key in [key for key in self._sent if key not in asked]:
            self._forget(key, forgotten)

    def _ask(self, spec: FetchSpec, by_id: bool, changed: list[FetchSpec]) -> SessionKey:
        key = _key(spec, by_id)
        sent = self._sent.get(key)
        # An ask waiting since the last round is that round's very spec.
        if sent is not spec and (sent is None or sent[2:5] != spec[2:5]):  # fetch_offset, current_leader_epoch, max_bytes
            changed.append(spec)
            self._sent[key] = spec
        return key

    def _forget(self, key: SessionKey, forgotten: list[FetchSpec]) -> None:
        sent = self._sent.pop(key, None)
        if sent is not None:
            forgotten.append(sent)
            self._known.pop(key, None)

    def answered(self, request: SessionRequest, session_id: int, error: int,
                 partitions: list[FetchedPartition]) -> tuple[list[FetchedPartition], bool] | None:
        """(the partitions the answer carries, whether it is complete); an incremental answer
        leaves out the partitions with nothing new since the session last told them, which
        `last_told` gives. None if the request must be sent again outside the session (the
        session ended)."""
        if request.generation != self._generation:
            return (partitions, True) if request.generation == OUTSIDE_SESSION else None
        if error:
            self._closing_id = self._id or self._closing_id
            self._reset()
            return None if error in SESSION_ERRORS else (partitions, True)
        for found in partitions:  # bounded by the partitions followed from this leader
            key = found.topic, found.partition
            if key in self._sent:
                self._known[key] = found._replace(records=b"") if found.records else found
        if request.epoch == INITIAL_EPOCH:
            self._opening = False
            if session_id == NO_SESSION_ID:  # declined: the next round tries again
                self._reset()
            else:
                self._id, self._epoch = session_id, _next_epoch(INITIAL_EPOCH)
            return partitions, True
        return partitions, False

    def last_told(self, spec: FetchSpec) -> FetchedPartition | None:
        """What the leader's session last told of `spec`'s partition."""
        return self._known.get(_key(spec, self._by_id))

    def _reset(self) -> None:
        self._id, self._epoch, self._opening = NO_SESSION_ID, INITIAL_EPOCH, False
        self._sent.clear()
        self._known.clear()
        self._generation += 1


def outside_session(specs: list[FetchSpec], by_id: bool) -> SessionRequest:
    """A full fetch outside any session."""
    return SessionRequest(NO_SESSION_ID, FINAL_EPOCH, specs, specs, [], by_id, OUTSIDE_SESSION)


def _key(spec: FetchSpec, by_id: bool) -> SessionKey:
    return (spec.topic_id if by_id else spec.topic), spec.partition
