"""What a coordinator placed on an internal topic's partitions owns, and when: the shape the group
coordinator (__consumer_offsets) and the transaction coordinator (__transaction_state) share.

Ownership follows leadership (the replica manager tells `partition_changed`):
- immigration: on becoming a partition's leader, its keys are read from its log (`_read`) and
  taken in (`_loaded`); meanwhile requests for them answer COORDINATOR_LOAD_IN_PROGRESS;
- emigration: on ceasing to lead it (follower, closed), its keys are dropped (`_dropped`), and
  requests for them answer NOT_COORDINATOR, so that clients look up the new coordinator.

Tasks: one task group, run by `run`, owns the loads and whatever the coordinator spawns (work
asked for before `run` starts when it does); one failing ends the coordinator, which the broker
notices.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from replog.replica.partition import Partition, ReplicaState

from . import offsets_log
from .placement import partition_for

logger = logging.getLogger(__name__)


class Loading:
    """A partition whose keys are being read; `epoch` tells a stale load from the current one."""

    def __init__(self, epoch: int):
        self.epoch = epoch


class Owned:
    def __init__(self, epoch: int):
        self.epoch = epoch


class PartitionOwner:
    """`topic`: the internal topic; `keys`: what its partitions hold, for the log lines;
    `reload_on_new_epoch`: whether a new leader epoch of a partition led here throughout is read
    again (the transaction coordinator's epoch is the one its markers carry)."""

    topic: str
    keys: str
    reload_on_new_epoch = False

    def __init__(self, broker_id: int, partition_count: Callable[[], int]):
        self.broker_id = broker_id
        self._partition_count = partition_count
        self._partitions: dict[int, Loading | Owned] = {}
        self._tasks: asyncio.TaskGroup | None = None
        self._pending: list[Callable[[asyncio.TaskGroup], None]] = []  # work asked for before `run`

    async def run(self) -> None:
        """Own the loads and the coordinator's work, until cancelled."""
        async with asyncio.TaskGroup() as tasks:
            self._tasks = tasks
            for start in self._pending:  # bounded by the partitions led before the start
                start(tasks)
            self._pending.clear()
            self._started(tasks)

    def _started(self, tasks: asyncio.TaskGroup) -> None:
        """Start the coordinator's own tasks (its timers)."""

    def _spawn(self, coroutine_factory: Callable[[], Any], name: str) -> asyncio.Task | None:
        """The task, or None if it waits for `run`."""
        if self._tasks is None:
            self._pending.append(lambda tasks: tasks.create_task(coroutine_factory(), name=name))
            return None
        return self._tasks.create_task(coroutine_factory(), name=name)

    # -- immigration and emigration ----------------------------------------------------------

    def partition_changed(self, partition: Partition) -> None:
        """The replica manager's report of a hosted replica that started, changed leadership or
        closed."""
        if partition.topic != self.topic:
            return
        index = partition.partition_id
        current = self._partitions.get(index)
        if partition.state is ReplicaState.LEADER:
            if current is not None and current.epoch == partition.leader_epoch:
                return
            if isinstance(current, Owned):
                if not self.reload_on_new_epoch:
                    current.epoch = partition.leader_epoch  # led here throughout: memory is current
                    return
                self._emigrate(index, f"leader epoch {partition.leader_epoch}")
            self._immigrate(index, partition)
        elif current is not None:
            self._emigrate(index, f"replica is {partition.state.value}")

    def _immigrate(self, index: int, partition: Partition) -> None:
        loading = Loading(partition.leader_epoch)
        self._partitions[index] = loading
        logger.debug("loading %s topic=%s partition=%d broker=%d epoch=%d", self.keys, self.topic, index,
                     self.broker_id, loading.epoch)
        self._spawn(lambda: self._load(index, partition, loading), f"load-{self.keys}-{index}")

    async def _load(self, index: int, partition: Partition, loading: Loading) -> None:
        try:
            table = await self._read(partition)
        except offsets_log.LoadAborted as aborted:
            logger.warning("load of %s abandoned topic=%s partition=%d broker=%d epoch=%d reason=%s", self.keys,
                           self.topic, index, self.broker_id, loading.epoch, aborted)
            if self._partitions.get(index) is loading:
                del self._partitions[index]
            return
        if self._partitions.get(index) is not loading:
            return  # emigrated, or loading again at a newer epoch
        self._partitions[index] = Owned(loading.epoch)
        count = self._loaded(index, table, loading.epoch)
        logger.info("loaded %s topic=%s partition=%d broker=%d epoch=%d %s=%d", self.keys, self.topic, index,
                    self.broker_id, loading.epoch, self.keys, count)

    async def _read(self, partition: Partition) -> Any:
        """The partition's table, read from its log (offsets_log.load); LoadAborted if it stops
        being led here meanwhile."""
        raise NotImplementedError

    def _loaded(self, index: int, table: Any, epoch: int) -> int:
        """Take in a partition's table, now owned at `epoch`; how many keys it held."""
        raise NotImplementedError

    def _emigrate(self, index: int, reason: str) -> None:
        del self._partitions[index]
        count = self._dropped(index)
        logger.info("dropped %s topic=%s partition=%d broker=%d %s=%d reason=%s", self.keys, self.topic, index,
                    self.broker_id, self.keys, count, reason)

    def _dropped(self, index: int) -> int:
        """Forget the keys of partition `index`, answering their waiting requests; how many."""
        raise NotImplementedError

    def close(self) -> None:
        """The broker is stopping: every key goes, its waiting requests answered NOT_COORDINATOR."""
        for index in list(self._partitions):  # bounded by the topic's partitions
            self._emigrate(index, "broker stopping")

    # -- placement -----------------------------------------------------------------------------

    def partition_of(self, key: str) -> int:
        return partition_for(key, self._partition_count())

    def _placed_in(self, keys, index: int) -> list[str]:
        """The keys among `keys` placed in partition `index`."""
        count = self._partition_count()
        return [key for key in keys if partition_for(key, count) == index]

    def owns(self, key: str) -> int | None:
        """None if this broker coordinates the key now, else the error to answer."""
        state = self._partitions.get(self.partition_of(key))
        if state is None:
            return ErrorCode.not_coordinator
        if isinstance(state, Loading):
            return ErrorCode.coordinator_load_in_progress
        return None

    def _owned_epoch(self, index: int) -> int | None:
        state = self._partitions.get(index)
        return state.epoch if isinstance(state, Owned) else None

    @property
    def loading(self) -> bool:
        """Whether any partition is being loaded (a listing of every key would be partial)."""
        return any(isinstance(state, Loading) for state in self._partitions.values())
