"""Producer ids and epochs: a transactional id initialised twice fences its first producer; an
idempotent producer's batches are checked against its sequence; its id is not reused."""

from __future__ import annotations

from replog.net.codec import ApiKey
from tests.support.batches import build_batch

from ..protocol import TRANSACTION_KEY, coordinated, create_topic, produce, until_served
from ..targets import Target
from .registry import scenario

TRANSACTION_TIMEOUT_MS = 60_000


def _init_producer_id(target: Target, transactional_id: str | None, producer_id: int = -1, epoch: int = -1) -> dict:
    def send() -> dict:
        return target.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": transactional_id, "transaction_timeout": TRANSACTION_TIMEOUT_MS,
                                                          "producer_id": producer_id, "producer_epoch": epoch})
    if transactional_id is None:
        return until_served(target, send, "producer ids")
    return coordinated(target, transactional_id, TRANSACTION_KEY, send)


@scenario
def transactional_id_initialised_twice(target: Target) -> dict:
    first = _init_producer_id(target, "differential-transactional")
    second = _init_producer_id(target, "differential-transactional")
    return {"errors": [first["error_code"], second["error_code"]],
            "same_producer_id": first["producer_id"] == second["producer_id"],
            "epoch_bumped": second["producer_epoch"] == first["producer_epoch"] + 1}


@scenario
def idempotent_producer_sequences(target: Target) -> dict:
    topic = "differential-idempotent"
    create_topic(target, topic)
    ids = _init_producer_id(target, None)
    producer_id, epoch = ids["producer_id"], ids["producer_epoch"]

    def sent(sequence: int) -> tuple[str, int]:
        batch = build_batch(producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)
        answer = produce(target, topic, 0, batch)
        return answer["error_code"], answer["base_offset"]

    return {"init": ids["error_code"], "first": sent(0), "duplicate": sent(0), "gap": sent(5), "next": sent(1)}


@scenario
def idempotent_producer_initialised_again(target: Target) -> dict:
    """InitProducerId naming an idempotent producer's id and epoch (as a producer resetting after
    an error does) without a transactional id: a new producer id, not a bumped epoch (epochs are
    bumped for transactional ids only), and the old id's next batch is still taken."""
    topic = "differential-reinitialised"
    create_topic(target, topic)
    ids = _init_producer_id(target, None)
    produce(target, topic, 0, build_batch(producer_id=ids["producer_id"], producer_epoch=ids["producer_epoch"], base_sequence=0))
    bumped = _init_producer_id(target, None, ids["producer_id"], ids["producer_epoch"])
    stale = produce(target, topic, 0, build_batch(producer_id=ids["producer_id"], producer_epoch=ids["producer_epoch"], base_sequence=1))
    return {"bump": bumped["error_code"], "same_producer_id": bumped["producer_id"] == ids["producer_id"],
            "epoch_bumped": bumped["producer_epoch"] == ids["producer_epoch"] + 1, "stale_epoch_produce": stale["error_code"]}
