"""TxnOffsetCommit: a transactional producer commits a group's offsets in its transaction (the
consume-transform-produce loop), through the group coordinator (groups/coordinator.py), which
holds them pending until the transaction's marker (docs/design.md §16.6).

Checks as Kafka's KafkaApis: Write on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED
for every partition), then Read on the group (GROUP_AUTHORIZATION_FAILED), then Read on each
topic (TOPIC_AUTHORIZATION_FAILED) and the partition's existence (UNKNOWN_TOPIC_OR_PARTITION).
A producer's first commit to the group's partition in a transaction is verified with its
transaction coordinator first (KIP-890, net/transaction_verification.py), so that a commit
arriving after its transaction ended opens none. A request may name 50,000 partitions: it is
answered in slices (loop_slices.py).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.groups import OFFSETS_TOPIC
from replog.security.acls import AclOperation, ResourceType

from ..authorization import authorized
from ..codec import ApiKey, Request
from ..loop_slices import LoopSlices
from . import handles
from .committed_offsets import commit_answer, requested_commits

FIRST_ABORTABLE_VERSION = 4  # TRANSACTION_ABORTABLE known to the client (KIP-890)
FIRST_LOAD_IN_PROGRESS_VERSION = 2  # older clients (before KAFKA-7296) fail on COORDINATOR_LOAD_IN_PROGRESS


@handles(ApiKey.TXN_OFFSET_COMMIT)
async def txn_offset_commit(services, request: Request):
    body = request.body
    slices = LoopSlices()
    commits, refusals = await requested_commits(services, request, _request_refusal(services, request), slices)
    accepted = [commit for commit, refusal in zip(commits, refusals) if not refusal]
    known_errors = iter(await services.groups.commit_transactional(
        body.group_id, body.producer_id, body.producer_epoch, getattr(body, "member_id", ""),
        getattr(body, "group_instance_id", None), getattr(body, "generation_id", -1), accepted,
        _verify(services, request)) if accepted else ())
    errors = [refusal or next(known_errors) for refusal in refusals]
    if request.api_version < FIRST_LOAD_IN_PROGRESS_VERSION:
        errors = [ErrorCode.coordinator_not_available if error == ErrorCode.coordinator_load_in_progress else error
                  for error in errors]
    return await commit_answer(request, "transactional offset commit", commits, errors, slices)


def _request_refusal(services, request: Request) -> int:
    """The error every partition is answered with, or 0."""
    body = request.body
    if not authorized(services, request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id):
        return ErrorCode.transactional_id_authorization_failed
    if not authorized(services, request, AclOperation.READ, ResourceType.GROUP, body.group_id):
        return ErrorCode.group_authorization_failed
    return ErrorCode.none


def _verify(services, request: Request):
    """How the coordinator asks whether the producer's transaction is open, for the group's
    partition of __consumer_offsets; None when verification is off."""
    verifier = services.transaction_verifier
    if verifier is None:  # transaction.partition.verification.enable=false
        return None
    body = request.body
    partition = (OFFSETS_TOPIC, services.groups.partition_of(body.group_id))

    async def verify() -> int:
        errors = await verifier.verify(body.transactional_id, body.producer_id, body.producer_epoch, [partition],
                                       abortable_known=request.api_version >= FIRST_ABORTABLE_VERSION)
        return errors.get(partition, ErrorCode.none)

    return verify
