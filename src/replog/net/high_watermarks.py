"""The high watermarks a broker learns at scrape time for its consumer groups' lag (the group
coordinator's committed offsets against them; obs/metrics.py computes the lag).

The coordinator of a group knows its committed offsets, the leader of a partition its high
watermark, and the two are seldom the same broker. Each scrape therefore reads the partitions
led here from their replicas and asks every other leader for the rest with one ListOffsets
(latest, read uncommitted: what kafka-consumer-groups and the lag exporters compare committed
offsets with) on a connection opened for it: a scrape every few seconds does not pay for a
connection kept open and supervised. A leader that does not answer in time costs only its
partitions' lag at this scrape.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from replog.coord_backends.paths import BrokerRegistration

from .client import BrokerConnection, BrokerUnavailable, NoCommonVersion
from .client_security import NO_SECURITY, ClientSecurity

logger = logging.getLogger(__name__)

CLIENT_ID = "replog-metrics"

TopicPartition = tuple[str, int]


async def learn(wanted: Iterable[TopicPartition], led_here: Callable[[str, int], int | None],
                leader_of: Callable[[str, int], int | None], address_of: Callable[[int], BrokerRegistration | None],
                timeout_s: float, security: ClientSecurity = NO_SECURITY) -> dict[TopicPartition, int]:
    """The high watermark of each wanted partition that can be learnt within `timeout_s`:
    `led_here` gives it for a partition led here (else None), `leader_of` names the leader of
    any other (None without one) and `address_of` where that broker listens (its inter-broker
    listener, connected to as `security` says)."""
    known: dict[TopicPartition, int] = {}
    elsewhere: dict[int, list[TopicPartition]] = {}
    for topic, partition in wanted:  # bounded by the partitions the groups committed
        high_watermark = led_here(topic, partition)
        if high_watermark is not None:
            known[topic, partition] = high_watermark
            continue
        leader = leader_of(topic, partition)
        if leader is not None:
            elsewhere.setdefault(leader, []).append((topic, partition))
    answers = await asyncio.gather(*(_ask(leader, address_of(leader), partitions, timeout_s, security)
                                     for leader, partitions in elsewhere.items()))
    for answer in answers:  # one per leader broker
        known.update(answer)
    return known


async def _ask(leader: int, address: BrokerRegistration | None, partitions: list[TopicPartition],
               timeout_s: float, security: ClientSecurity) -> dict[TopicPartition, int]:
    if address is None:
        return {}  # not registered: gone, or not yet back
    try:
        async with asyncio.timeout(timeout_s):
            async with await BrokerConnection.open(address.host, address.port, client_id=CLIENT_ID,
                                                   connect_timeout_s=timeout_s, request_timeout_s=timeout_s,
                                                   security=security) as leader_connection:
                return await leader_connection.high_watermarks(partitions)
    except (BrokerUnavailable, NoCommonVersion, TimeoutError) as error:
        logger.debug("high watermarks not learnt for the lag metrics leader=%d partitions=%d error=%r", leader,
                     len(partitions), error)
        return {}
