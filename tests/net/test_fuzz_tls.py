"""The adversarial fuzzer (test_fuzz.py) against an SSL listener and a SASL_SSL one: the same
frames and slow senders, every byte of them inside TLS from clients that never authenticate,
and the cases of the TLS layer itself (tests/hostile/tls_cases.py: no handshake, a garbled or
stalled one, a record layer broken after one). After every case the broker must be alive,
answer a TLS client's ApiVersions (which a SASL listener answers before authentication) and
have logged no internal error; the well-behaved producer and consumer, on the broker's
PLAINTEXT listener, must read back every record acknowledged (arena.py).

On the SSL listener also: every seed reaches its handler, and the wrong batches, whose checks
are those of a client allowed to produce; before authentication a SASL listener answers only
ApiVersions and SaslHandshake, and closes the connection on anything else. The certificates are
made here (trustme). Wide requests, the connection limits and the descriptor flood are left to
test_fuzz.py: what they attack lies behind the handshake, the same for any listener.
"""

from __future__ import annotations

import os

import pytest
import trustme

from tests.hostile import catalog
from tests.hostile.arena import Arena, TlsFiles
from tests.hostile.cases import FRAME_WAIT_S
from tests.hostile.seeds import all_seeds
from tests.hostile.tls_cases import tls_cases
from tests.hostile.wire import Connection, Ending
from tests.net.test_fuzz import RANDOM_CASES, RANDOM_SEED, fuzz

pytestmark = pytest.mark.cluster  # each test runs against a broker process

FRAME_CASE_STRIDE = int(os.environ.get("REPLOG_FUZZ_TLS_FRAME_STRIDE", "16"))


@pytest.fixture(scope="module", params=["SSL", "SASL_SSL"])
def arena(tmp_path_factory, request):
    directory = tmp_path_factory.mktemp(f"fuzz-{request.param.lower()}")
    ca = trustme.CA()
    files = TlsFiles(directory / "ca.pem", directory / "broker.pem")
    ca.cert_pem.write_to_path(str(files.ca_file))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(files.keystore))
    with Arena(directory / "data", tls=files, tls_listener=request.param) as arena:
        yield arena


@pytest.fixture(scope="module")
def witness(arena):
    with arena.witness() as witness:
        yield witness


def authenticated_clients_only(arena: Arena) -> None:
    if arena.tls_listener != "SSL":
        pytest.skip("its checks are an authenticated client's; unauthenticated, a SASL listener closes the connection")


def test_every_seed_reaches_its_handler_over_tls(arena):
    authenticated_clients_only(arena)
    unanswered = []
    for seed in all_seeds(arena.target.names):
        with Connection(arena.target.host, arena.target.port, tls=arena.target.tls) as connection:
            if connection.exchange([seed.frame], 1, FRAME_WAIT_S).ending is not Ending.ANSWERED:
                unanswered.append(seed.label)
    assert not unanswered


def test_the_tls_layer(arena, witness):
    fuzz(arena, witness, tls_cases(arena.target.names))


def test_malformed_frames_over_tls(arena, witness):
    # test_fuzz.py sends every case in plaintext; inside TLS they take the same paths once
    # decrypted, so a spread-out sample is sent, and every case with REPLOG_FUZZ_TLS_FRAME_STRIDE=1.
    fuzz(arena, witness, catalog.frame_cases(arena.target)[::FRAME_CASE_STRIDE])


@pytest.mark.timeout(max(300, RANDOM_CASES // 10))
def test_random_frames_over_tls(arena, witness):
    print(f"REPLOG_FUZZ_SEED={RANDOM_SEED} REPLOG_FUZZ_CASES={RANDOM_CASES}")
    fuzz(arena, witness, catalog.random_cases(arena.target, RANDOM_SEED, RANDOM_CASES),
         replay=f"REPLOG_FUZZ_SEED={RANDOM_SEED} REPLOG_FUZZ_CASES={RANDOM_CASES} replays it\n")


def test_wrong_batches_over_tls(arena, witness):
    authenticated_clients_only(arena)
    fuzz(arena, witness, catalog.batch_family(arena.target))


def test_slow_senders_over_tls(arena, witness):
    fuzz(arena, witness, catalog.slow_family(arena.target))
