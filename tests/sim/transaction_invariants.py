"""The transactions' contract, checked on the live leaders after every step of a transactional
schedule (transactions.py runs its producers and coordinator).

What a read_committed consumer may see is read as one reads it: Fetch at isolation level 1
(Partition.read_for_consumer), batches up to the LSO, the answer's aborted transactions
applied as Kafka's consumer applies them (a transactional batch of a producer whose aborted
transaction began at or before it is skipped until that producer's abort marker; control
batches are never records). On every leader, unfenced, at each step:
- no record of a transaction the coordinator has not decided to commit is visible: none of an
  aborted one, none of one still open, none a fenced producer wrote (its transaction was aborted
  when it was fenced);
- the LSO never passes an open transaction: it is at most the first offset of every transaction
  of the leader's own log without its marker there, and at most the HW. (Kafka's first
  unstable offset also holds back while a marker is above the HW; replog's leaders release a
  transaction once its marker is in their log, which is safe because the coordinator decided
  the outcome before writing any marker and writes it again to the next leader.)
- the LSO never goes back while the replica leads at one epoch;
- the offsets a group coordinator would load from the leader's log (offsets_log's table, kept
  up with the log as it grows) hold, as committed, only offsets of transactions the coordinator
  decided to commit: offsets committed in a transaction apply only if it commits.

After the schedule, once every transaction has ended (finish): every partition's leader has
LSO = HW, and every acknowledged record of a committed transaction is visible to read_committed
on every partition the transaction wrote to (where its log still holds it: the replication
checker answers for one a compacted log lost): a transaction's records become visible on all of
its partitions or, aborted, on none. And a group coordinator's load of each leader's partition
(offsets_log.load) holds no offset pending and, of each group, the offset of its last committed
transaction.

Records are one a batch, numbered by the batch's timestamp as the replication checker reads
them; the checker reads the log's batch headers and producer fields only, and a marker's
record to know its outcome.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from replog.groups import offsets_log
from replog.groups.placement import partition_for
from replog.replica.partition import Partition
from replog.replica.results import READ_COMMITTED
from replog.storage.batch_format import CONTROL_BATCH_BIT, TRANSACTIONAL_BIT, producer_fields
from replog.storage.control_batches import decode_marker
from replog.storage.records import batch_headers
from tests.sim.invariants import READ_ALL_BYTES, Violation, records_below, running_leaders

INPUT_TOPIC = "input"  # what the transactional producers' groups consume, committing offsets of


@dataclasses.dataclass(eq=False)
class Transaction:
    """One transaction of one producer id and epoch, as its coordinator knows it."""

    name: str  # for the trace: transactional id and its transaction's serial number
    producer_id: int
    producer_epoch: int
    partitions: set[int] = dataclasses.field(default_factory=set)
    committed: bool | None = None  # None until the coordinator decides (writes Prepare*)
    acknowledged: dict[int, int] = dataclasses.field(default_factory=dict)  # record number -> partition
    fenced_records: set[int] = dataclasses.field(default_factory=set)  # appended by its fenced producer
    offsets: dict[str, int] = dataclasses.field(default_factory=dict)  # group -> the offset it committed, acknowledged


@dataclasses.dataclass
class _LeaderView:
    """What the checker has read of one leader replica at one epoch."""

    replica: Partition
    scanned: int  # the log is scanned for transactions up to here
    read: int  # read_committed has read up to here
    last_stable_offset: int = -1
    open_first_offsets: dict[int, int] = dataclasses.field(default_factory=dict)  # producer id -> first offset
    offsets: offsets_log.Table = dataclasses.field(default_factory=offsets_log.Table)  # the log scanned, as loaded


class TransactionChecker:
    def __init__(self) -> None:
        self._transactions: dict[int, Transaction] = {}  # record number -> its transaction
        self._views: dict[tuple[int, str, int, int], _LeaderView] = {}  # (broker, topic, partition, epoch)
        self._found: list[str] = []  # violations seen between steps, raised at the next check

    def appended(self, number: int, transaction: Transaction, fenced: bool) -> None:
        """Record `number` is about to be appended in `transaction` (by its fenced producer if `fenced`)."""
        self._transactions[number] = transaction
        if fenced:
            transaction.fenced_records.add(number)

    def aborted(self, number: int) -> bool:
        """Whether record `number` is of a transaction its coordinator decided to abort."""
        transaction = self._transactions.get(number)
        return transaction is not None and transaction.committed is False

    def found(self, violation: str) -> None:
        self._found.append(violation)

    def check_step(self, brokers: Mapping[int, Any]) -> None:
        if self._found:
            raise Violation(self._found[0])
        for broker_id, replica in running_leaders(brokers):
            if not replica.fenced:
                self._check_leader(broker_id, replica)

    def _check_leader(self, broker_id: int, replica: Partition) -> None:
        key = (broker_id, replica.topic, replica.partition_id, replica.leader_epoch)
        view = self._views.get(key)
        if view is None or view.replica is not replica:
            view = self._views[key] = _LeaderView(replica, replica.log_start_offset, replica.log_start_offset)
        where = f"{replica.topic}-{replica.partition_id} broker {broker_id} epoch {replica.leader_epoch}"
        last_stable_offset = replica.last_stable_offset
        if last_stable_offset < view.last_stable_offset:
            raise Violation(f"LSO went back: {where} from {view.last_stable_offset} to {last_stable_offset}")
        view.last_stable_offset = last_stable_offset
        if view.scanned < replica.log_end_offset:
            _scan(view)
            self._check_applied(view.offsets, where)
        high_watermark = replica.high_watermark
        if last_stable_offset > min([high_watermark, *view.open_first_offsets.values()]):
            raise Violation(f"LSO past an open transaction: {where} LSO={last_stable_offset} hw={high_watermark}, "
                            f"transactions open from (producer id: offset) {view.open_first_offsets}")
        if view.read < last_stable_offset:
            for offset, number in self._read_committed(replica, view.read):
                self._require_visible(number, f"{where} offset {offset} LSO={last_stable_offset}")
            view.read = last_stable_offset

    def _require_visible(self, number: int, where: str) -> None:
        """Record `number` is visible to read_committed at `where`: allowed of a committed transaction's only."""
        transaction = self._transactions.get(number)
        if transaction is None or transaction.committed:
            return
        fenced = " written by its fenced producer," if number in transaction.fenced_records else ""
        state = "open" if transaction.committed is None else "aborted"
        raise Violation(f"read_committed sees record {number} of {state} transaction {transaction.name} "
                        f"(producer {transaction.producer_id} epoch {transaction.producer_epoch}),{fenced} at {where}")

    def _read_committed(self, replica: Partition, fetch_offset: int) -> list[tuple[int, int]]:
        """(offset, record number) of the producers' batches a read_committed consumer fetching
        from `fetch_offset` takes, Kafka's consumer's filter (CompletedFetch) applied."""
        result = replica.read_for_consumer(fetch_offset, READ_ALL_BYTES, isolation_level=READ_COMMITTED)
        if result.error_code:
            return []
        aborted = sorted(result.aborted_transactions or (), key=lambda aborted_txn: aborted_txn.first_offset)
        aborted_producers: set[int] = set()
        visible = []
        for piece in result.slices:
            buf = piece.read()
            for header in batch_headers(buf):
                if header.last_offset < fetch_offset:
                    continue
                if header.attributes & TRANSACTIONAL_BIT:
                    while aborted and aborted[0].first_offset <= header.last_offset:
                        aborted_producers.add(aborted.pop(0).producer_id)
                    producer_id = producer_fields(buf, header.position).producer_id
                    if header.attributes & CONTROL_BATCH_BIT:
                        if not decode_marker(buf[header.position:header.position + header.size_bytes]).committed:
                            aborted_producers.discard(producer_id)
                        continue
                    if producer_id in aborted_producers:
                        continue
                elif header.attributes & CONTROL_BATCH_BIT:
                    continue
                visible.append((header.base_offset, header.max_timestamp))
        return visible

    async def finish(self, leaders: Mapping[int, Partition], transactions: list[Transaction]) -> dict[str, int]:
        """Every transaction has ended and `leaders` (partition -> its leader replica) lead:
        nothing is unstable, each committed transaction is visible on all its partitions, and
        the groups' offsets are those of their last committed transactions (group -> offset)."""
        self._check_visible(leaders, transactions)
        return await self._check_offsets(leaders, transactions)

    def _check_visible(self, leaders: Mapping[int, Partition], transactions: list[Transaction]) -> None:
        visible: dict[int, set[int]] = {}
        logged: dict[int, set[int]] = {}  # the records in each leader's log: a compacted one may have lost superseded ones
        for partition, replica in leaders.items():
            logged[partition] = set(records_below(replica, replica.log_end_offset).values())
            if replica.last_stable_offset != replica.high_watermark:
                raise Violation(f"a transaction never ended: {replica.topic}-{partition} LSO={replica.last_stable_offset} "
                                f"hw={replica.high_watermark} after every transaction was completed")
            visible[partition] = set()
            for offset, number in self._read_committed(replica, replica.log_start_offset):
                self._require_visible(number, f"{replica.topic}-{partition} offset {offset}, after the schedule")
                visible[partition].add(number)
        for transaction in transactions:
            if transaction.committed is None:
                raise Violation(f"transaction {transaction.name} never decided")
            missing = sorted(number for number, partition in transaction.acknowledged.items()
                             if transaction.committed and number in logged[partition] - visible[partition])
            if missing:
                shown = sorted(number for number in transaction.acknowledged if number not in missing)
                raise Violation(f"committed transaction {transaction.name} only partly visible: records {missing} are not "
                                f"(on partitions {sorted({transaction.acknowledged[number] for number in missing})}), "
                                f"records {shown} are")

    async def _check_offsets(self, leaders: Mapping[int, Partition], transactions: list[Transaction]) -> dict[str, int]:
        """The table a group coordinator taking each leader's partition over would load holds,
        of each group, the offset its last committed transaction committed, none if none did:
        an offset committed in a transaction applies only if the transaction commits."""
        expected: dict[str, int] = {}
        for transaction in transactions:  # in the order begun, which is the order ended per transactional id
            if transaction.committed:
                expected.update(transaction.offsets)
        for partition, replica in leaders.items():
            where = f"{replica.topic}-{partition} broker {replica.local_broker_id} epoch {replica.leader_epoch}"
            table = await offsets_log.load(replica)
            if pending := sorted(table.pending.groups()):
                raise Violation(f"offsets of groups {pending} still pending in {where} after every transaction ended")
            self._check_applied(table, where)
            for group, number in expected.items():
                held = table.offsets.get(group, {}).get((INPUT_TOPIC, 0))
                if partition_for(group, len(leaders)) == partition and (held is None or held.offset != number):
                    raise Violation(f"group {group} holds {held} at {where}, not offset {number} of its last "
                                    f"committed transaction {self._transactions[number].name}")
        return expected

    def _check_applied(self, table: offsets_log.Table, where: str) -> None:
        """Every offset the table holds as committed is of a transaction its coordinator decided to commit."""
        for group, offsets in table.offsets.items():
            number = offsets[INPUT_TOPIC, 0].offset
            transaction = self._transactions.get(number)
            if transaction is None or not transaction.committed:
                state = "no" if transaction is None else "open" if transaction.committed is None else "aborted"
                raise Violation(f"group {group} holds offset {number} committed in {state} transaction "
                                f"{offsets[INPUT_TOPIC, 0].metadata} at {where}")


def group_of(transactional_id: str) -> str:
    """The group whose input a transactional id's producer consumes, committing its offsets."""
    return f"{transactional_id}-group"


def _scan(view: _LeaderView) -> None:
    """The leader's log from where the last scan ended to its end: which producers' transactions
    are open, from which offset."""
    replica = view.replica
    for piece in replica.log.read(view.scanned, READ_ALL_BYTES):
        buf = piece.read()
        offsets_log.apply_batches(replica, view.offsets, buf, view.scanned)
        for header in batch_headers(buf):
            if header.last_offset < view.scanned or not header.attributes & TRANSACTIONAL_BIT:
                continue
            producer_id = producer_fields(buf, header.position).producer_id
            if header.attributes & CONTROL_BATCH_BIT:
                view.open_first_offsets.pop(producer_id, None)
            else:
                view.open_first_offsets.setdefault(producer_id, header.base_offset)
    view.scanned = replica.log_end_offset
