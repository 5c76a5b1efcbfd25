"""Which brokers are presumed gone: a refusal of their registered address, told once, ended by
the first connection that succeeds; and which connections are a follower's: those naming a life
of the broker seen registered."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from replog.coord_backends.paths import BrokerRegistration
from replog.net.client import BrokerConnection, BrokerRefused, BrokerUnavailable, ConnectionLost
from replog.net.leader_connections import (
    LeaderConnections,
    client_id_for_logs,
    fetch_from,
    follower_client_id,
    follower_of,
    registered_follower,
)
from replog.net.server import KafkaServer
from replog.obs import BrokerMetrics
from replog.replica.partition import FetchFrom
from tests.support.polling import eventually

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


def test_a_fetch_is_a_followers_only_if_it_names_a_life_of_the_broker_seen_registered():
    registered = {PEER: BrokerRegistration("127.0.0.1", 9999, None, "second")}
    lives = {PEER: ["first", "second"]}
    assert fetch_from(registered, lives, PEER, follower_client_id(PEER, "second")) is FetchFrom.REGISTERED
    assert fetch_from(registered, lives, PEER, follower_client_id(PEER, "first")) is FetchFrom.EARLIER
    assert fetch_from({}, lives, PEER, follower_client_id(PEER, "second")) is FetchFrom.EARLIER, "its registration went"
    for posing in ("rdkafka", None, follower_client_id(PEER, None), follower_client_id(ME, "second"), "replog-follower-2."):
        assert fetch_from(registered, lives, PEER, posing) is None, posing
    # A life not seen registered (a restarted broker fetches before it registers) is not told
    # from a guess: read as a consumer's, whichever it is.
    for unseen in (follower_client_id(PEER, "guessed"), "replog-follower-2.secon"):
        assert fetch_from(registered, lives, PEER, unseen) is FetchFrom.UNSEEN, unseen
    assert fetch_from({}, {}, PEER, follower_client_id(PEER, "third")) is FetchFrom.UNSEEN
    assert fetch_from({PEER: BrokerRegistration("127.0.0.1", 9999)}, {}, PEER, follower_client_id(PEER, "first")) is FetchFrom.UNSEEN


def test_a_connection_is_a_followers_for_its_loss_only_if_it_names_the_registered_life():
    """Else any client could have a live broker probed, and presumed gone when that refuses
    (LeaderConnections), by closing a connection that named it."""
    registered = {PEER: BrokerRegistration("127.0.0.1", 9999, None, "second")}
    assert registered_follower(follower_client_id(PEER, "second"), lambda: registered) == PEER
    for posing in ("rdkafka", None, follower_client_id(PEER, None), follower_client_id(PEER, "first"),
                   follower_client_id(ME, "second")):
        assert registered_follower(posing, lambda: registered) is None, posing


async def test_only_a_registered_lifes_connection_lost_makes_the_broker_probe_it():
    """Closing a connection whose client id names a broker but not its registered life tells the
    broker nothing: else any client could have a live broker probed at will, and presumed gone
    (its leaderships deposed, its replicas shrunk out of ISRs) whenever a probe was refused."""
    lost: list[int] = []
    services = SimpleNamespace(metadata=SimpleNamespace(brokers={PEER: BrokerRegistration("127.0.0.1", 9999, None, "second")}),
                               follower_connection_lost=lost.append)
    server = KafkaServer(services, "127.0.0.1", 0, max_request_bytes=1 << 20, metrics=BrokerMetrics())
    await server.start()
    try:
        for client_id in ("rdkafka", follower_client_id(PEER, None), follower_client_id(PEER, "first"),
                          follower_client_id(PEER, "second")):
            connection = await BrokerConnection.open("127.0.0.1", server.port, client_id=client_id)  # asks ApiVersions
            connection.close()

            async def closed() -> bool:
                return server.connection_count == 0

            await eventually(closed, WAIT_S, "the server to see the connection closed")
        assert lost == [PEER], "a connection of no registered life had the broker probe it"
    finally:
        await server.stop()


@pytest.mark.parametrize("client_id", ["replog-follower-\u00b2", "replog-follower-" + "9" * 5000, "replog-follower-\u0663.x"])
def test_a_client_id_naming_no_int32_broker_is_no_followers(client_id):
    """Unicode digits and thousands of them name no broker: int() refused them, in the middle of
    decoding the connection's requests."""
    registered = {PEER: BrokerRegistration("127.0.0.1", 9999, None, "second")}
    assert follower_of(client_id) is None
    assert registered_follower(client_id, lambda: registered) is None
    assert fetch_from(registered, {}, PEER, client_id) is None


def test_a_followers_life_id_is_left_out_of_log_lines():
    assert client_id_for_logs(follower_client_id(PEER, "c0ffee")) == "replog-follower-2.*"
    for client_id in ("rdkafka", None, follower_client_id(PEER, None)):
        assert client_id_for_logs(client_id) == client_id
