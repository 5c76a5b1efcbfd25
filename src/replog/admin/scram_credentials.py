"""Users' SCRAM credentials in the coordination store, where Kafka kept them in ZooKeeper:
`/config/users/<user>` holds `{"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,
server_key=...,iterations=4096","SCRAM-SHA-512":...}}` (coord_backends/paths.py: UserConfig), so
one user holds either mechanism or both, and a user's other configs stay beside them.

    alter_user_scram_credentials     AlterUserScramCredentials: deletions and upsertions, checked,
                                     then written one user at a time, all or none of a user's
    describe_user_scram_credentials  DescribeUserScramCredentials: users' mechanisms and iterations
    credential                       what a SASL SCRAM server checks a client's proof against

The checks, their order and their words are Kafka's (ZkAdminManager, ScramControlManager): a
user's empty name or unknown mechanism first, then one user and mechanism changed twice in a
request, then the deletion of what is not there. Any of them refuses every change of that user.
Beyond Kafka, a salted password that is not one of the mechanism's hashes, or an empty salt, is
refused as UNACCEPTABLE_CREDENTIAL: no client makes either from a password.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence

from kio.schema.errors import ErrorCode

from replog.coord_backends import (BadVersion, NodeExists, NoNode, NotEmpty, Store, StoreError, children_or_empty,
                                   get_all)
from replog.coord_backends import paths
from replog.coord_backends.paths import InvalidNodeValue, UserConfig

from replog.security.scram import (
    ITERATIONS_MAX,
    ITERATIONS_MIN,
    MECHANISMS,
    MECHANISMS_BY_NAME,
    MECHANISMS_BY_TYPE,
    CredentialFormatError,
    ScramCredential,
    credential_from_salted_password,
    format_credential,
    parse_credential,
)

from .errors import AdminError, store_failure
from .topics import CONFLICT_ATTEMPTS_MAX, _get_or_none

logger = logging.getLogger(__name__)

ALTERED_TWICE = "A user credential cannot be altered twice in the same request"
EMPTY_USER = "Username must not be empty"
DESCRIBE_FAILED = "Error processing describe user SCRAM credential configs request"


@dataclasses.dataclass(frozen=True)
class ScramDeletion:
    user: str
    mechanism: int  # the wire's type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512, anything else unknown


@dataclasses.dataclass(frozen=True)
class ScramUpsertion:
    user: str
    mechanism: int
    iterations: int
    salt: bytes = dataclasses.field(repr=False)
    salted_password: bytes = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True)
class UserScramCredentials:
    """A user's described credentials: (mechanism name, iterations) each, in mechanism order; or
    the error that user is answered with."""

    user: str
    credentials: tuple[tuple[str, int], ...] = ()
    error: AdminError | None = None


def user_and_mechanism_refusal(user: str, mechanism: int) -> AdminError | None:
    """Kafka's refusal of a change to an empty user name or an unknown mechanism."""
    if user == "":
        return AdminError(ErrorCode.unacceptable_credential, EMPTY_USER)
    if mechanism not in MECHANISMS_BY_TYPE:
        return AdminError(ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    return None


def iterations_refusal(iterations: int) -> AdminError | None:
    if iterations < ITERATIONS_MIN:
        return AdminError(ErrorCode.unacceptable_credential, "Too few iterations")
    if iterations > ITERATIONS_MAX:
        return AdminError(ErrorCode.unacceptable_credential, "Too many iterations")
    return None


def _refusal(change: ScramDeletion | ScramUpsertion) -> AdminError | None:
    """What Kafka refuses a change for without reading the store."""
    refusal = user_and_mechanism_refusal(change.user, change.mechanism)
    if refusal is not None or isinstance(change, ScramDeletion):
        return refusal
    mechanism = MECHANISMS_BY_TYPE[change.mechanism]
    refusal = iterations_refusal(change.iterations)
    if refusal is None and (not change.salt or len(change.salted_password) != hashlib.new(mechanism.hash_name).digest_size):
        refusal = AdminError(ErrorCode.unacceptable_credential,
                             f"The salt is empty or the salted password is not a {mechanism.name} hash")
    return refusal


def description_refusal(code: int, user: str) -> AdminError:
    """Kafka's words for a user a description refuses (RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE).
    A client reads them from the code too: librdkafka reads this message past its end."""
    if code == ErrorCode.duplicate_resource:
        return AdminError(code, f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}")
    if user == "":
        return AdminError(code, EMPTY_USER)
    return AdminError(code, f"Attempt to describe a user credential that does not exist: {user}")


async def _no_pause() -> None:
    pass


async def alter_user_scram_credentials(store: Store, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion],
                                       pause: Callable[[], Awaitable[None]] = _no_pause) -> dict[str, AdminError | None]:
    """Apply the changes; per user, in the order first named: the refusal or failure that left
    all of that user's credentials as they were, or None when all of its changes were made.
    `pause()` is awaited before each user's write: a request handler gives the event loop back
    there (a request may name 50,000 users)."""
    by_user: dict[str, list[ScramDeletion | ScramUpsertion]] = {}
    results: dict[str, AdminError | None] = {}
    for change in [*deletions, *upsertions]:
        by_user.setdefault(change.user, []).append(change)
        if results.get(change.user) is None:
            results[change.user] = _refusal(change)
    for user, changes in by_user.items():
        if results[user] is None and len({change.mechanism for change in changes}) < len(changes):
            results[user] = AdminError(ErrorCode.duplicate_resource, ALTERED_TWICE)
    for user, refusal in results.items():
        if refusal is None:
            await pause()
            try:
                results[user] = await _alter_user(store, user, by_user[user])
            except StoreError as error:  # InvalidNodeValue among them: a node this version cannot read
                results[user] = store_failure("SCRAM credentials", error)
    return results


async def _alter_user(store: Store, user: str, changes: list[ScramDeletion | ScramUpsertion]) -> AdminError | None:
    """One user's valid changes, in one write of its node (compare-and-set, read again on a
    conflict); the RESOURCE_NOT_FOUND of a deletion of a credential it does not have."""
    path = paths.user_config(user)
    for _ in range(CONFLICT_ATTEMPTS_MAX):  # another admin's write in between: read again
        node = await _get_or_none(store, path)
        config = dict(UserConfig.decode(node[0]).config) if node else {}
        for change in changes:
            name = MECHANISMS_BY_TYPE[change.mechanism].name
            if isinstance(change, ScramDeletion):
                if config.pop(name, None) is None:
                    return AdminError(ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")
            else:
                credential = credential_from_salted_password(MECHANISMS_BY_TYPE[change.mechanism], change.salt,
                                                             change.salted_password, change.iterations)
                config[name] = format_credential(credential)
        try:
            if node is None:
                await store.create(path, UserConfig(config).encode(), make_parents=True)
            elif config:
                await store.set(path, UserConfig(config).encode(), node[1])
            else:
                await _delete_user_node(store, path, node[1])
        except (NodeExists, BadVersion, NoNode):
            continue
        logger.info("altered SCRAM credentials user=%r upserted=%s deleted=%s", user, _names(changes, ScramUpsertion),
                    _names(changes, ScramDeletion))
        return None
    return AdminError(ErrorCode.unknown_server_error, f"user {user!r}'s credentials kept changing meanwhile; try again")


async def _delete_user_node(store: Store, path: str, version: int) -> None:
    """A user with quotas on its client ids keeps its node, their parent, with no config."""
    try:
        await store.delete(path, version)
    except NotEmpty:
        await store.set(path, UserConfig({}).encode(), version)


def _names(changes: list[ScramDeletion | ScramUpsertion], kind: type) -> str:
    """The mechanisms of the changes of one kind, for a log line: never more than the names."""
    return ",".join(MECHANISMS_BY_TYPE[change.mechanism].name for change in changes if isinstance(change, kind)) or "-"


def _described(user: str, node: tuple[bytes, int] | None) -> UserScramCredentials | None:
    """The user's SCRAM credentials from its node; None if it holds none."""
    if node is None:
        return None
    try:
        config = UserConfig.decode(node[0]).config
        credentials = tuple((mechanism.name, parse_credential(config[mechanism.name]).iterations)
                            for mechanism in MECHANISMS if mechanism.name in config)
    except (InvalidNodeValue, CredentialFormatError) as error:
        logger.error("unreadable SCRAM credentials user=%r: %s", user, error)
        return UserScramCredentials(user, error=AdminError(ErrorCode.unknown_server_error, DESCRIBE_FAILED))
    return UserScramCredentials(user, credentials) if credentials else None


async def _user_nodes(store: Store, users: Sequence[str]) -> list[tuple[bytes, int] | None]:
    return await get_all(store, [paths.user_config(user) for user in users])


async def describe_user_scram_credentials(store: Store, users: Sequence[str] | None = None) -> list[UserScramCredentials]:
    """The named users' credentials, each once in the order first named, with Kafka's error for a
    user named twice, named empty or without credentials; with none named, every user that has
    a credential, by name. Never a salt or a key."""
    if not users:
        everyone = sorted(paths.unsanitized(child) for child in await children_or_empty(store, paths.USER_CONFIGS))
        described = map(_described, everyone, await _user_nodes(store, everyone))
        return [credentials for credentials in described if credentials is not None]
    named = list(dict.fromkeys(users))
    counts = {user: 0 for user in named}
    for user in users:
        counts[user] += 1
    readable = [user for user in named if user != "" and counts[user] == 1]
    found = dict(zip(readable, await _user_nodes(store, readable)))
    results = []
    for user in named:
        if user == "":
            results.append(UserScramCredentials(user, error=description_refusal(ErrorCode.resource_not_found, user)))
        elif counts[user] > 1:
            results.append(UserScramCredentials(user, error=description_refusal(ErrorCode.duplicate_resource, user)))
        else:
            results.append(_described(user, found[user]) or UserScramCredentials(
                user, error=description_refusal(ErrorCode.resource_not_found, user)))
    return results


async def credential(store: Store, user: str, mechanism: str) -> ScramCredential | None:
    """The user's stored credential for the mechanism (a name, as a SASL handshake gives it);
    None for an unknown user, mechanism or credential. An unreadable one raises InvalidNodeValue
    or CredentialFormatError, neither quoting it."""
    if mechanism not in MECHANISMS_BY_NAME or user == "":
        return None
    node = await _get_or_none(store, paths.user_config(user))
    if node is None:
        return None
    stored = UserConfig.decode(node[0]).config.get(mechanism)
    return None if stored is None else parse_credential(stored)
