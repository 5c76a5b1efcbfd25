"""Reassignment planning: a balanced assignment reached by moving as few replicas as possible. Pure.

Serves `cluster add-brokers` (spread onto new, empty brokers), `cluster remove-brokers` (move
everything off some brokers) and `reassign generate` (given topics onto given brokers). Input and
output are assignments `{(topic, partition): [broker, ...]}`, preferred leader first.

What a plan achieves, each goal strictly before the next:

1. Hard rules: every partition keeps its replication factor on distinct target brokers, and
   every target broker holds floor or ceil of replicas / brokers. (Always possible once each
   replication factor fits the brokers: fill the brokers round-robin, one partition after another.)
2. Rack spread: as many distinct racks per partition as possible, summed over partitions. Full
   spread is min(rf, racks) (Kafka's rack-aware rule); when uneven racks make it incompatible
   with balance (one broker alone in its rack cannot hold a replica of every partition), balance
   wins and the spread lost is the least possible.
3. Fewest replicas moved: every added replica is a full copy of its partition.
4. Fewest bytes moved: among plans moving as many replicas, the smaller partitions move.

Goals 2-4 are one min-cost flow (source -> partition -> (partition, rack) -> broker -> sink), with
weights so large that each goal outranks every later one: a unit of flow is one replica, an edge
to a broker that already holds the partition's replica costs nothing, any other costs
`move + size_bytes`; a partition's second replica in one rack costs `rack`; a broker's replica
above floor costs `ceil`, so min cost fills every floor. The flow picks by itself which brokers get
the ceil, so it meets the arithmetic lower bound (`moves_lower_bound`) whenever the rack rule allows.

Preferred leaders come after, as a second flow over each partition's new replicas: every broker
leads floor or ceil of partitions / brokers, and a partition keeps its preferred leader whenever
balance allows. Reordering replicas moves no data, so leadership never costs a replica move. With
one replication factor for all partitions this balance always exists (Hall's condition follows
from the replica balance); mixing replication factors, it is kept as close as the replicas allow.

The result is deterministic: the networks are built in sorted order and the search breaks ties
by node number.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
from collections.abc import Collection, Iterable, Mapping, Sequence

from .assignment import BrokerRack, _racks
from .errors import InvalidReplicaAssignment, InvalidReplicationFactor

PartitionKey = tuple[str, int]


@dataclasses.dataclass(frozen=True)
class Move:
    """One partition whose replica list changes: new replicas, or only a new preferred leader."""

    topic: str
    partition: int
    old_replicas: tuple[int, ...]
    new_replicas: tuple[int, ...]
    size_bytes: int

    @property
    def added(self) -> tuple[int, ...]:
        return tuple(broker for broker in self.new_replicas if broker not in self.old_replicas)

    @property
    def removed(self) -> tuple[int, ...]:
        return tuple(broker for broker in self.old_replicas if broker not in self.new_replicas)

    @property
    def copied_bytes(self) -> int:
        return self.size_bytes * len(self.added)


@dataclasses.dataclass(frozen=True)
class Plan:
    assignment: Mapping[PartitionKey, tuple[int, ...]]
    moves: tuple[Move, ...]  # sorted by topic, partition; reorders (no replica added) included
    replicas_moved: int
    bytes_moved: int
    lower_bound: int  # replicas that balance alone forces to move, racks aside


def plan_balance(
    current: Mapping[PartitionKey, Sequence[int]],
    brokers: Sequence[BrokerRack],
    remove: Collection[int] = (),
    size_bytes: Mapping[PartitionKey, int] | None = None,
) -> Plan:
    """The assignment of `current`'s partitions over `brokers` minus `remove`, and the moves to it.

    A replica on a broker missing from `brokers` (not registered, or left out of a `reassign
    generate` broker list) is moved off it, as from a removed broker. `size_bytes` (per
    partition, 0 where missing) only decides between plans that move as many replicas.
    """
    rack_of = _racks(brokers)
    _check_current(current)
    _check_removable(current, rack_of, remove)
    targets = sorted(set(rack_of) - set(remove))
    _check_replication_factors(current, targets, remove)
    if not current:  # nothing to place, and perhaps no broker to place it on
        return Plan(assignment={}, moves=(), replicas_moved=0, bytes_moved=0, lower_bound=0)
    size_bytes = size_bytes or {}
    keys = sorted(current)
    replica_sets = _place_replicas(keys, current, {broker: rack_of[broker] for broker in targets}, size_bytes)
    leaders = _choose_leaders(keys, current, replica_sets, targets)
    assignment = {key: _ordered(current[key], replica_sets[key], leaders[key]) for key in keys}
    moves = tuple(
        Move(topic, partition, tuple(current[topic, partition]), assignment[topic, partition], size_bytes.get((topic, partition), 0))
        for topic, partition in keys
        if tuple(current[topic, partition]) != assignment[topic, partition]
    )
    return Plan(
        assignment=assignment,
        moves=moves,
        replicas_moved=sum(len(move.added) for move in moves),
        bytes_moved=sum(move.copied_bytes for move in moves),
        lower_bound=moves_lower_bound(current, targets),
    )


def moves_lower_bound(current: Mapping[PartitionKey, Sequence[int]], targets: Collection[int]) -> int:
    """Replicas that must move to bring every target broker (at least one) to floor or ceil of the mean.

    Every replica off the targets moves, and so does every replica above a broker's target; the
    ceil goes to the brokers holding most, which leaves the least above the targets.
    """
    counts = collections.Counter(broker for replicas in current.values() for broker in replicas)
    total = sum(counts.values())
    if not total:
        return 0
    floor, ceil_count = divmod(total, len(targets))
    on_targets = sorted((counts[broker] for broker in targets), reverse=True)
    off_targets = total - sum(on_targets)
    return off_targets + sum(max(0, count - floor - (rank < ceil_count)) for rank, count in enumerate(on_targets))


def _check_current(current: Mapping[PartitionKey, Sequence[int]]) -> None:
    for (topic, partition), replicas in sorted(current.items()):
        if not replicas or len(set(replicas)) != len(replicas) or min(replicas) < 0:
            raise InvalidReplicaAssignment(
                f"topic {topic!r} partition {partition}: replicas {list(replicas)} must be distinct, non-negative broker ids"
            )


def _check_removable(current: Mapping[PartitionKey, Sequence[int]], rack_of: Mapping[int, str | None], remove: Collection[int]) -> None:
    # A removed broker that is not registered is fine (moving off a dead broker) if it holds
    # replicas; one that is neither is most likely a typo.
    holding = {broker for replicas in current.values() for broker in replicas}
    unknown = sorted(set(remove) - set(rack_of) - holding)
    if unknown:
        raise InvalidReplicaAssignment(
            f"cannot remove brokers {_ids(unknown)}: they are not registered and hold no replica of these topics"
        )


def _check_replication_factors(current: Mapping[PartitionKey, Sequence[int]], targets: Sequence[int], remove: Collection[int]) -> None:
    if not current:
        return
    needed, topic = max((len(replicas), topic) for (topic, _), replicas in current.items())
    if needed <= len(targets):
        return
    if remove:
        raise InvalidReplicationFactor(
            f"cannot remove brokers {_ids(sorted(remove))}: topic {topic!r} needs {needed} replicas"
            f" and only {len(targets)} brokers would remain"
        )
    raise InvalidReplicationFactor(
        f"topic {topic!r} needs {needed} replicas and only {len(targets)} brokers are given ({_ids(targets)})"
    )


def _ids(brokers: Iterable[int]) -> str:
    return ", ".join(str(broker) for broker in brokers)


def _place_replicas(
    keys: Sequence[PartitionKey],
    current: Mapping[PartitionKey, Sequence[int]],
    rack_of: Mapping[int, str | None],
    size_bytes: Mapping[PartitionKey, int],
) -> dict[PartitionKey, set[int]]:
    """Each partition's new replica set: goals 1-4 of the module docstring, as one min-cost flow."""
    total = sum(len(current[key]) for key in keys)
    most_bytes = sum(size_bytes.get(key, 0) * len(current[key]) for key in keys)
    # Each weight exceeds the most that all later goals together can cost.
    move_cost = most_bytes + 1
    rack_cost = (total + 1) * move_cost
    ceil_cost = (total + 1) * rack_cost
    racks = _rack_groups(rack_of)
    network = _Network()
    source = network.add_node()
    partition_nodes = [network.add_node() for _ in keys]
    broker_node = {broker: network.add_node() for broker in sorted(rack_of)}
    sink = network.add_node()
    _add_balanced_sinks(network, broker_node, total, sink, ceil_cost)
    placements: dict[PartitionKey, list[tuple[int, int]]] = {}
    for key, node in zip(keys, partition_nodes):
        replicas = current[key]
        network.add_edge(source, node, len(replicas), 0)
        move = move_cost + size_bytes.get(key, 0)
        placements[key] = []
        for members in racks:
            entry = node
            if len(members) > 1:
                entry = network.add_node()
                network.add_edge(node, entry, 1, 0)
                if (doubled := min(len(replicas), len(members)) - 1) > 0:
                    network.add_edge(node, entry, doubled, rack_cost)
            for broker in members:
                edge = network.add_edge(entry, broker_node[broker], 1, 0 if broker in replicas else move)
                placements[key].append((edge, broker))
    placed = network.min_cost_max_flow(source, sink)
    assert placed == total, f"placed {placed} of {total} replicas"
    return {key: {broker for edge, broker in edges if network.flow(edge)} for key, edges in placements.items()}


def _rack_groups(rack_of: Mapping[int, str | None]) -> list[list[int]]:
    """Brokers grouped by rack; without racks every broker is a rack of its own."""
    if all(rack is None for rack in rack_of.values()):
        return [[broker] for broker in sorted(rack_of)]
    by_rack: dict[str, list[int]] = collections.defaultdict(list)
    for broker in sorted(rack_of):
        by_rack[rack_of[broker]].append(broker)  # type: ignore[index]  (a mix is refused by _racks)
    return [by_rack[rack] for rack in sorted(by_rack)]


def _choose_leaders(
    keys: Sequence[PartitionKey],
    current: Mapping[PartitionKey, Sequence[int]],
    replica_sets: Mapping[PartitionKey, set[int]],
    targets: Sequence[int],
) -> dict[PartitionKey, int]:
    """Each partition's preferred leader among its new replicas: balanced, changed only if needed."""
    count = len(keys)
    change_cost = 1
    ceil_cost = (count + 1) * change_cost
    # Only mixed replication factors can need more than ceil; such a broker costs the most.
    overflow_cost = (count + 1) * ceil_cost
    network = _Network()
    source = network.add_node()
    partition_nodes = [network.add_node() for _ in keys]
    broker_node = {broker: network.add_node() for broker in targets}
    sink = network.add_node()
    _add_balanced_sinks(network, broker_node, count, sink, ceil_cost)
    for node in broker_node.values():
        network.add_edge(node, sink, count, overflow_cost)
    choices: dict[PartitionKey, list[tuple[int, int]]] = {}
    for key, node in zip(keys, partition_nodes):
        network.add_edge(source, node, 1, 0)
        preferred = current[key][0]
        choices[key] = [
            (network.add_edge(node, broker_node[broker], 1, 0 if broker == preferred else change_cost), broker)
            for broker in sorted(replica_sets[key])
        ]
    chosen = network.min_cost_max_flow(source, sink)
    assert chosen == count, f"chose leaders for {chosen} of {count} partitions"
    return {key: next(broker for edge, broker in edges if network.flow(edge)) for key, edges in choices.items()}


def _add_balanced_sinks(network: _Network, broker_node: Mapping[int, int], total: int, sink: int, ceil_cost: int) -> None:
    """Edges that let each broker take floor(total / brokers) units free and one more at `ceil_cost`."""
    floor, remainder = divmod(total, len(broker_node))
    for node in broker_node.values():
        network.add_edge(node, sink, floor, 0)
        if remainder:
            network.add_edge(node, sink, 1, ceil_cost)


def _ordered(old: Sequence[int], chosen: set[int], leader: int) -> tuple[int, ...]:
    """The new replica list: incoming replicas take the places of the outgoing, leader first."""
    incoming = iter(sorted(chosen - set(old)))
    replicas = [broker if broker in chosen else next(incoming) for broker in old]
    replicas.remove(leader)
    return (leader, *replicas)


class _Network:
    """Min-cost max-flow by successive shortest paths.

    Dijkstra over reduced costs (costs plus node potentials, kept non-negative) finds a
    cheapest augmenting path. While the cheapest cost stays the same, all paths of that cost are
    filled at once, Dinic-style, over the edges of zero reduced cost: the first round fills every
    kept replica in one go. Costs must be non-negative, so the potentials start at zero. Edge e
    and e ^ 1 are a pair: the forward edge and its residual.
    """

    def __init__(self) -> None:
        self._edges_from: list[list[int]] = []
        self._head: list[int] = []
        self._capacity: list[int] = []
        self._cost: list[int] = []
        self._potential: list[int] = []

    def add_node(self) -> int:
        self._edges_from.append([])
        self._potential.append(0)
        return len(self._edges_from) - 1

    def add_edge(self, tail: int, head: int, capacity: int, cost: int) -> int:
        assert cost >= 0 and capacity >= 0, (cost, capacity)
        edge = len(self._head)
        self._head += [head, tail]
        self._capacity += [capacity, 0]
        self._cost += [cost, -cost]
        self._edges_from[tail].append(edge)
        self._edges_from[head].append(edge + 1)
        return edge

    def flow(self, edge: int) -> int:
        return self._capacity[edge ^ 1]

    def min_cost_max_flow(self, source: int, sink: int) -> int:
        total = 0
        # Each round adds at least one unit (the path Dijkstra found), and the source's edges
        # bound the flow: bounded rounds.
        while (found := self._update_potentials(source, sink)) is not None:
            rise, path = found
            if rise:
                # A new, dearer cost: with distinct partition sizes usually one path alone has it,
                # and a level graph would cost a whole extra pass to find only that path.
                total += self._augment(path)
                continue
            while (levels := self._admissible_levels(source, sink)) is not None:
                total += self._fill_paths(source, sink, levels)
        return total

    def _augment(self, path: list[int]) -> int:
        amount = min(self._capacity[edge] for edge in path)
        for edge in path:
            self._capacity[edge] -= amount
            self._capacity[edge ^ 1] += amount
        return amount

    def _update_potentials(self, source: int, sink: int) -> tuple[int, list[int]] | None:
        """Dijkstra from the source until the sink is settled: how much dearer than the last round
        the cheapest path to the sink is, and that path; None when no residual path reaches it.

        Every node's potential rises by its distance, capped at the sink's: the cap keeps every
        reduced cost >= 0 and makes the cheapest paths to the sink exactly the zero-cost ones.
        """
        head_of, capacity, cost, potential = self._head, self._capacity, self._cost, self._potential
        unreached = None
        distance: list[int | None] = [unreached] * len(potential)
        distance[source] = 0
        reached_by = [-1] * len(potential)
        settled = [False] * len(potential)
        queue = [(0, source)]
        while queue:
            reached, node = heapq.heappop(queue)
            if settled[node]:
                continue
            if node == sink:
                break
            settled[node] = True
            base = reached + potential[node]
            for edge in self._edges_from[node]:
                if capacity[edge]:
                    head = head_of[edge]
                    via = base + cost[edge] - potential[head]
                    known = distance[head]
                    if known is unreached or via < known:
                        distance[head] = via
                        reached_by[head] = edge
                        heapq.heappush(queue, (via, head))
        rise = distance[sink]
        if rise is unreached:
            return None
        for node, reached in enumerate(distance):
            potential[node] += rise if reached is unreached or reached > rise else reached
        path = []
        node = sink
        while node != source:
            path.append(reached_by[node])
            node = head_of[reached_by[node] ^ 1]
        return rise, path[::-1]

    def _admissible_levels(self, source: int, sink: int) -> list[int] | None:
        """Breadth-first levels over residual edges of zero reduced cost; None if the sink is not reached."""
        head_of, capacity, cost, potential = self._head, self._capacity, self._cost, self._potential
        levels = [-1] * len(self._edges_from)
        levels[source] = 0
        frontier = [source]
        while frontier and levels[sink] < 0:
            following = []
            for node in frontier:
                base = potential[node]
                for edge in self._edges_from[node]:
                    head = head_of[edge]
                    if levels[head] < 0 and capacity[edge] and cost[edge] + base == potential[head]:
                        levels[head] = levels[node] + 1
                        following.append(head)
            frontier = following
        return levels if levels[sink] >= 0 else None

    def _fill_paths(self, source: int, sink: int, levels: list[int]) -> int:
        """A blocking flow over the level graph: augment path after path until none is left."""
        next_edge = [0] * len(self._edges_from)
        total = 0
        while (path := self._level_path(source, sink, levels, next_edge)) is not None:
            total += self._augment(path)
        return total

    def _level_path(self, source: int, sink: int, levels: list[int], next_edge: list[int]) -> list[int] | None:
        path: list[int] = []
        node = source
        while node != sink:
            edge = self._admissible_edge(node, levels, next_edge)
            if edge is not None:
                path.append(edge)
                node = self._head[edge]
                continue
            if not path:
                return None
            # A dead end: back up and never try that edge again in this round.
            node = self._head[path.pop() ^ 1]
            next_edge[node] += 1
        return path

    def _admissible_edge(self, node: int, levels: list[int], next_edge: list[int]) -> int | None:
        head_of, capacity, cost, potential = self._head, self._capacity, self._cost, self._potential
        edges, level, base = self._edges_from[node], levels[node] + 1, potential[node]
        index = next_edge[node]
        while index < len(edges):
            edge = edges[index]
            head = head_of[edge]
            if capacity[edge] and levels[head] == level and cost[edge] + base == potential[head]:
                next_edge[node] = index
                return edge
            index += 1
        next_edge[node] = index
        return None
