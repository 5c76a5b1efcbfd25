"""Which brokers are presumed gone: a refusal of their registered address, told once, ended by
the first connection that succeeds."""

from __future__ import annotations

import pytest

from replog.coord_backends.paths import BrokerRegistration
from replog.net.client import BrokerRefused, BrokerUnavailable, ConnectionLost
from replog.net.leader_connections import LeaderConnections, fetch_from, follower_client_id, follower_of
from replog.replica.partition import FetchFrom
from tests.polling import eventually

ME, PEER = 1, 2
WAIT_S = 10


class _Opened:
    closed = False

    def close(self) -> None:
        self.closed = True


def telling(open_connection) -> tuple[LeaderConnections, list[int]]:
    """Connections to PEER through `open_connection`, and the brokers they presumed gone."""
    connections = LeaderConnections(ME, lambda: {PEER: BrokerRegistration("127.0.0.1", 9999)}, 60_000,
                                    open_connection=open_connection)
    told: list[int] = []
    connections.on_presumed_gone = told.append
    return connections, told


async def until_presumed_gone(connections: LeaderConnections, what: str) -> None:
    async def presumed() -> bool:
        return connections.presumed_gone(PEER)

    await eventually(presumed, WAIT_S, what)


async def test_a_refusal_presumes_a_broker_gone_once_and_a_connection_believes_it_again():
    answers = {"next": BrokerRefused("nothing listens")}

    async def open_connection(broker_id: int, registration: BrokerRegistration) -> _Opened:
        if answers["next"] is not None:
            raise answers["next"]
        return _Opened()

    connections, told = telling(open_connection)
    try:
        connections.connection_failed(PEER)
        await until_presumed_gone(connections, "the refusal to presume it gone")
        assert told == [PEER]
        answers["next"] = None  # it restarted: the next probe connects

        async def believed() -> bool:
            return not connections.presumed_gone(PEER)

        await eventually(believed, WAIT_S, "the probe to find it back")
        assert told == [PEER]
    finally:
        connections.close()


@pytest.mark.parametrize("failure", [
    BrokerUnavailable("timed out: a paused host, or a cut link"),
    # Dropped every time, not refused: given up after PROBES_AFTER_LOST_CONNECTION_MAX probes.
    ConnectionLost("connection lost"),
])
async def test_a_failure_that_is_not_a_refusal_presumes_nothing(failure):
    async def open_connection(broker_id: int, registration: BrokerRegistration) -> _Opened:
        raise failure

    connections, told = telling(open_connection)
    try:
        connections.connection_failed(PEER)
        await connections._probes[PEER]
        assert not connections.presumed_gone(PEER) and told == []
    finally:
        connections.close()


async def test_a_broker_caught_dying_is_probed_again_until_it_refuses():
    """A process being killed completes connections to its dying listener and drops them: the
    first probe loses its connection, a later one is refused (a probe that stopped at the lost
    connection left a killed leader named until its session expired)."""
    answers = [ConnectionLost("connection lost"), ConnectionLost("connection lost"), BrokerRefused("nothing listens")]

    async def open_connection(broker_id: int, registration: BrokerRegistration) -> _Opened:
        raise answers.pop(0) if len(answers) > 1 else answers[0]

    connections, told = telling(open_connection)
    try:
        connections.connection_failed(PEER)
        await until_presumed_gone(connections, "a probe after the lost connections to be refused")
        assert told == [PEER]
    finally:
        connections.close()


def test_a_follower_connection_names_its_broker_and_no_other_client_does():
    assert follower_of("replog-follower-3") == 3
    assert follower_of(follower_client_id(3, "c0ffee")) == 3
    for client_id in (None, "rdkafka", "replog-follower-", "replog-follower-x", "replog"):
        assert follower_of(client_id) is None


async def test_a_refusal_after_a_presumption_ran_out_is_a_new_death_to_tell():
    """A broker presumed gone past the session timeout, back meanwhile without anyone connecting
    to it, then killed again: its second death is told too (the bench's 9 s failovers)."""
    async def open_connection(broker_id: int, registration: BrokerRegistration) -> _Opened:
        raise BrokerRefused("nothing listens")

    connections = LeaderConnections(ME, lambda: {PEER: BrokerRegistration("127.0.0.1", 9999)}, 100,
                                    open_connection=open_connection)
    told: list[int] = []
    connections.on_presumed_gone = told.append
    try:
        for death in (1, 2):
            connections.connection_failed(PEER)
            await connections._probes[PEER]  # ends when the presumption runs out, after 0.1 s
            assert told == [PEER] * death
    finally:
        connections.close()


def test_a_fetch_is_from_the_registered_life_only_if_its_life_id_is_the_registrations():
    registered = {PEER: BrokerRegistration("127.0.0.1", 9999, None, "second")}
    assert fetch_from(registered, PEER, follower_client_id(PEER, "second")) is FetchFrom.REGISTERED
    assert fetch_from(registered, PEER, follower_client_id(PEER, "first")) is FetchFrom.EARLIER
    assert fetch_from({}, PEER, follower_client_id(PEER, "second")) is FetchFrom.UNREGISTERED
    # A broker that does not tell its life, or a registration without one, is taken at its word.
    assert fetch_from(registered, PEER, follower_client_id(PEER, None)) is FetchFrom.REGISTERED
    assert fetch_from({PEER: BrokerRegistration("127.0.0.1", 9999)}, PEER, follower_client_id(PEER, "first")) is FetchFrom.REGISTERED
