"""DescribeUserScramCredentials and AlterUserScramCredentials: users' SCRAM credentials in the
coordination store (admin/scram_credentials.py), as `kafka-configs --entity-type users` and
confluent-kafka's AdminClient manage them. Any broker answers, as it answers the topic admin
requests, to a client that may Describe (or Alter) the cluster: CLUSTER_AUTHORIZATION_FAILED
otherwise, as Kafka answers.

An upsertion carries the salt and the salted password the client made, never the password;
neither reaches a log line: a refusal logs the user and Kafka's words only. A request may name
50,000 users: each is answered in slices (loop_slices.py).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.admin import scram_credentials
from replog.admin.errors import AdminError, store_failure
from replog.admin.scram_credentials import ScramDeletion, ScramUpsertion
from replog.coord_backends import StoreError
from replog.security.acls import AclOperation
from replog.security.scram import MECHANISMS_BY_NAME

from ..authorization import authorized_on_cluster
from ..codec import ApiKey, Request
from ..loop_slices import LoopSlices, respond
from . import handles, log_refusal


def _result(request: Request, user: str, error: AdminError | None) -> dict:
    """A user's result fields: its error, logged as a refusal, or none."""
    if error is None:
        return {"user": user, "error_code": ErrorCode.none, "error_message": None}
    log_refusal(request, "SCRAM credentials", repr(user), error.code)
    return {"user": user, "error_code": error.code, "error_message": error.message}


@handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
async def describe_user_scram_credentials(services, request: Request):
    """Each named user once, or with none named (null or empty) every user with a credential:
    its mechanisms and iterations."""
    if not authorized_on_cluster(services, request, AclOperation.DESCRIBE):
        return await respond(request, {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                                       "error_message": None, "results": []})
    users = None if request.body.users is None else [user.name for user in request.body.users]
    try:
        described = await scram_credentials.describe_user_scram_credentials(services.store, users)
    except StoreError as error:
        failure = store_failure("SCRAM credentials", error)
        return await respond(request, {"throttle_time": 0, "error_code": failure.code, "error_message": failure.message,
                                       "results": []})
    slices = LoopSlices()
    results = []
    for entry in described:
        await slices.pause()
        results.append(_result(request, entry.user, entry.error) | {"credential_infos": [
            {"mechanism": MECHANISMS_BY_NAME[name].type, "iterations": iterations} for name, iterations in entry.credentials]})
    return await respond(request, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                                   "results": results}, slices)


@handles(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
async def alter_user_scram_credentials(services, request: Request):
    """One result per user named, in the order first named."""
    body = request.body
    slices = LoopSlices()
    if not authorized_on_cluster(services, request, AclOperation.ALTER):
        users = dict.fromkeys(change.name for change in (*body.deletions, *body.upsertions))
        return await respond(request, {"throttle_time": 0, "results": [
            {"user": user, "error_code": ErrorCode.cluster_authorization_failed, "error_message": None} for user in users]})
    outcomes = await scram_credentials.alter_user_scram_credentials(
        services.store,
        [ScramDeletion(deletion.name, deletion.mechanism) for deletion in body.deletions],
        [ScramUpsertion(upsertion.name, upsertion.mechanism, upsertion.iterations, upsertion.salt, upsertion.salted_password)
         for upsertion in body.upsertions], slices.pause)
    results = []
    for user, error in outcomes.items():
        await slices.pause()
        results.append(_result(request, user, error))
    return await respond(request, {"throttle_time": 0, "results": results}, slices)
