"""Broker and topic configuration: every setting's name, type, default and validation, in one place.

Names are Kafka's where Kafka has the setting (`zookeeper.session.timeout.ms` becomes
`coord.session.timeout.ms`, since the store may be etcd). A value arrives as text (a TOML
file, `--set key=value`, a CreateTopics/AlterConfigs request) and is parsed and checked here, so
a bad value fails at start-up, or at the request, with a message naming the setting.

Two registries:

- `SETTINGS`: broker settings. `load_broker_config` layers them: registry defaults < TOML file
  < `--set` overrides, into a frozen `BrokerConfig`.
- `TOPIC_SETTINGS`: every topic-level name Kafka 4.4 accepts. Each takes its parser from, and
  defaults to, a broker setting (Kafka's synonyms: `retention.ms` <- `log.retention.ms`,
  `max.message.bytes` <- `message.max.bytes`, ...), or where replog has no such broker setting
  (`TOPIC_ONLY_SETTINGS`) has Kafka's parser and default of its own. A topic's value is refused
  in Kafka's words, for clients that show them. A topic stores only its overrides, as text, under
  `/config/topics/[topic]`; `effective_topic_config` resolves them against the broker's values,
  and the settings classes of the layers below build themselves from the result
  (`LogConfig.from_topic_settings`, `PartitionConfig.from_topic_settings`).

The defaults written here are the only ones: `LogConfig`, `PartitionConfig` and `ManagerConfig`
take their fields' defaults from these registries, so a class built without settings (as tests
build them) behaves as a broker left at its defaults.

Kafka settings that exist only in other units (`log.retention.hours`, `log.roll.hours`, ...)
are not accepted: each quantity has one name here, the milliseconds one.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
import types
from collections.abc import Iterator, Mapping
from typing import Any, Callable, NamedTuple

from replog import inter_broker_settings, listener_settings, sasl_settings, tls_settings
from replog.listener_overrides import listener_values, overridden_setting
from replog.coord_backends import hide_credentials
from replog.coord_backends.base import SESSION_TIMEOUT_MS_DEFAULT
from replog.coord_backends.security import StoreSecurity
from replog.obs.state_change_events import EVENTS_MAX_DEFAULT as STATE_CHANGE_EVENTS_MAX_DEFAULT


class ConfigError(ValueError):
    """A setting is unknown or its value is invalid; the message names the setting (and its source)."""


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    parse: Callable[[str], Any]
    default: Any
    doc: str
    # A comma-separated list (Kafka's LIST type): the only kind IncrementalAlterConfigs may
    # APPEND to or SUBTRACT from.
    is_list: bool = False
    # The text as an error message may show it (coord.url's hides a user and password in it).
    shown: Callable[[str], str] = str


INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1  # Kafka's Long.MAX_VALUE: "never" or "no limit" for the flush, timestamp and lag settings
DEFAULT_PORT = 9092
DEFAULT_METRICS_PORT = 9644  # Redpanda's, so dashboards and scrape configs written for it fit
# Half of it, what followers may still fill, covers their catching up while an operator reacts;
# the other half the broker's own files: index files (~0.4% of the log), checkpoints and producer
# snapshots (kilobytes a partition), the embedded store's database, a restart's rebuilt indexes
# and a cleaning pass of __consumer_offsets' 100 MiB segments. Redpanda keeps 5 GiB, more than
# many development disks and small cloud volumes have spare; a machine with less than 1 GiB free
# is one write burst from full anyway.
LOG_DIR_MIN_FREE_BYTES_DEFAULT = 1 << 30
# Kafka 4's floor for segment.bytes and log.segment.bytes (KIP-1030; 14 bytes before): a topic of
# tiny segments costs every replica a file, an index and a descriptor per few records, so one
# principal could exhaust its brokers' descriptors. `internal.segment.bytes.min` lowers it on a
# broker whose operator wants small segments (tests, small disks).
SEGMENT_BYTES_MIN = 1 << 20
# The smallest segment a log can run with (a batch header): what a value the store already holds
# is held to, such as one written before the floor rose.
SEGMENT_BYTES_RUNNABLE_MIN = 14


class HostPort(NamedTuple):
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


# parsers: text -> value, raising ValueError with the reason, phrased to follow the value
# ("'abc' is not an integer"); _parse puts the setting's name, or the flag, in front.


def _integer(minimum: int, maximum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError("is not an integer") from None
        if not minimum <= value <= maximum:
            raise ValueError(f"must be at least {minimum}" if value < minimum else f"must be at most {maximum}")
        return value

    return parse


def _int32(minimum: int) -> Callable[[str], int]:
    return _integer(minimum, INT_MAX)


def _int64(minimum: int) -> Callable[[str], int]:
    return _integer(minimum, LONG_MAX)


def _boolean(text: str) -> bool:
    # Kafka's ConfigDef accepts exactly these, in any case.
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("must be true or false")
    return lowered == "true"


def _one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text

    return parse


def _level(minimum: int, maximum: int, *also: int) -> Callable[[str], int]:
    """A compression level: Kafka's range for the codec, or one of `also` (gzip's -1: zlib's default)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError("is not an integer") from None
        if not (minimum <= value <= maximum or value in also):
            raise ValueError(f"must be between {minimum} and {maximum}" + "".join(f" or equal to {level}" for level in also))
        return value

    return parse


def _optional_text(text: str) -> str | None:
    return text.strip() or None


def _paths(text: str) -> tuple[str, ...]:
    paths = tuple(part.strip() for part in text.split(",") if part.strip())
    if not paths:
        raise ValueError("must name at least one directory")
    return paths


def _host_port(text: str) -> HostPort:
    host, separator, port = text.strip().rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not separator or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("must be host:port with a port from 0 to 65535")
    return HostPort(host, int(port))


def _optional_listener(text: str) -> HostPort | None:
    """Empty: off; port 0: any free port (tests)."""
    return _host_port(text) if text.strip() else None


def _cleanup_policy(text: str) -> tuple[str, ...]:
    """delete, compact, or both (compact,delete: compacted, and old segments deleted too)."""
    policies = tuple(sorted({part.strip() for part in text.split(",") if part.strip()}))
    if not policies or not set(policies) <= {"compact", "delete"}:
        raise ValueError("must be delete, compact or compact,delete")
    return policies


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("is not a number") from None
    if not 0 <= value <= 1:
        raise ValueError("must be between 0 and 1")
    return value


def _throttled_replicas(text: str) -> tuple[str, ...]:
    entries = tuple(part.strip() for part in text.split(",") if part.strip())
    if entries == ("*",):
        return entries
    for entry in entries:
        partition, colon, broker = entry.partition(":")
        if not (colon and partition.strip().isdigit() and broker.strip().isdigit()):
            raise ValueError("is not '*' or PARTITION:BROKER pairs, comma-separated (e.g. 0:1,1:2)")
    return entries


class HostCount(NamedTuple):
    host: str
    count: int

    def __str__(self) -> str:
        return f"{self.host}:{self.count}"


def _host_counts(text: str) -> tuple[HostCount, ...]:
    """Kafka's `host:count,...` (max.connections.per.ip.overrides); empty: none."""
    counts = []
    for entry in (part.strip() for part in text.split(",") if part.strip()):
        host, colon, count = entry.rpartition(":")
        if not (colon and host.strip() and count.strip().isdigit()):
            raise ValueError("is not host:count pairs, comma-separated (e.g. 10.0.0.7:50,client.example.com:200)")
        counts.append(HostCount(host.strip().removeprefix("[").removesuffix("]"), int(count)))
    return tuple(counts)


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _claim_name(text: str) -> str:
    if not text.strip():
        raise ValueError("must name a claim")
    return text.strip()


def _jwks_url(text: str) -> str | None:
    """Empty: unset; else a URL whose protocol Kafka's OAuth settings accept (ConfigurationUtils.validateUrl)."""
    url = text.strip()
    if not url:
        return None
    scheme, colon, rest = url.partition(":")
    if not colon or not rest:
        raise ValueError("is a URL that is missing the protocol")
    if scheme.lower() not in ("http", "https", "file"):
        raise ValueError(f"is a URL that contains an invalid protocol ({scheme}); only http, https and file are "
                         "supported")
    return url


def _coord_url(text: str) -> str:
    from replog.coord_backends import ACCEPTED_FORMS, BadStoreUrl, open_store

    try:
        open_store(text)
    except BadStoreUrl as error:
        raise ValueError(f"is not a coordination URL: {error.reason}; accepted forms: {ACCEPTED_FORMS}") from None
    return text


# Kafka's authorizers, ZooKeeper-era and KRaft-era: either in a copied server.properties turns on
# replog's, which has their semantics.
AUTHORIZER_CLASS_NAMES = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                          "kafka.security.authorizer.AclAuthorizer", "StandardAuthorizer", "AclAuthorizer")


def _authorizer(text: str) -> str | None:
    name = text.strip()
    if not name:
        return None
    if name not in AUTHORIZER_CLASS_NAMES:
        raise ValueError(f"is not an authorizer replog has: {', '.join(AUTHORIZER_CLASS_NAMES)}, or empty for none")
    return AUTHORIZER_CLASS_NAMES[0]


_DAY_MS = 24 * 3600 * 1000
COORD_USERNAME_ENV = "REPLOG_COORD_USERNAME"
COORD_PASSWORD_ENV = "REPLOG_COORD_PASSWORD"

SETTINGS: dict[str, Setting] = {
    setting.name: setting
    for setting in [
        Setting("coord.url", _coord_url, "memory://", "coordination store URL (memory://, zk://..., etcd://...)",
                shown=hide_credentials),
        Setting(
            "coord.session.timeout.ms",
            _int32(1000),
            SESSION_TIMEOUT_MS_DEFAULT,
            "how long the store keeps a silent broker's session (and its ephemeral nodes) alive",
        ),
        # Who this process is in the store, and over what (store_security). Kafka reads its
        # ZooKeeper user from a JAAS file's Client section; here a setting, and a password file
        # or the environment, so that no config file or URL need hold the password.
        Setting("coord.username", _optional_text, None,
                f"the store user to sign in as: ZooKeeper SASL DIGEST-MD5, or an etcd user (default: ${COORD_USERNAME_ENV}; "
                "none: anonymous)"),
        Setting("coord.password.file", _optional_text, None,
                f"file whose first line is that user's password (default: ${COORD_PASSWORD_ENV})"),
        Setting("zookeeper.set.acl", _boolean, False,
                "ZooKeeper: nodes this process creates get an ACL letting only coord.username (and ZooKeeper's super "
                "user) read or change them; unlike Kafka's, none stays world-readable"),
        Setting("coord.ssl.client.enable", _boolean, False,
                "connect to the store over TLS (Kafka's zookeeper.ssl.client.enable; etcd too)"),
        Setting("coord.ssl.truststore.location", _optional_text, None,
                "PEM file of the CAs the store's certificate is checked against (default: the system's)"),
        Setting("coord.ssl.keystore.location", _optional_text, None,
                "PEM file of this process's client certificate chain and unencrypted private key, for a store that "
                "asks for one (ZooKeeper's ssl.clientAuth, etcd's --client-cert-auth)"),
        Setting("broker.id", _int32(0), 0, "this broker's id, unique in the cluster"),
        Setting("listeners", listener_settings.listeners, listener_settings.listeners(f"127.0.0.1:{DEFAULT_PORT}"),
                "NAME://host:port,... the broker binds, one server each (host:port alone: the PLAINTEXT listener)",
                is_list=True),
        Setting("advertised.listeners", listener_settings.advertised_listeners, None,
                "NAME://host:port,... clients are told to connect to, per listener (default: each listener's own "
                "address)", is_list=True),
        Setting("listener.security.protocol.map", listener_settings.protocol_map,
                listener_settings.protocol_map(listener_settings.DEFAULT_PROTOCOL_MAP),
                "NAME:PROTOCOL,... the security protocol of each listener name", is_list=True),
        Setting("inter.broker.listener.name", listener_settings.listener_name, None,
                "the listener other brokers connect to (default: PLAINTEXT, else the first listener)"),
        *(Setting(name, *tls_settings.SPECS[name]) for name in tls_settings.SSL_SETTING_NAMES),
        *(Setting(name, *sasl_settings.SPECS[name]) for name in sasl_settings.SASL_SETTING_NAMES),
        # OAUTHBEARER's token validation (KIP-768), per listener too (OAUTHBEARER_OVERRIDE).
        Setting("sasl.oauthbearer.jwks.endpoint.url", _jwks_url, None,
                "where the keys that sign OAUTHBEARER tokens are published: an http(s):// JWKS endpoint or a file:// "
                "JWKS file; required where OAUTHBEARER is enabled"),
        Setting("sasl.oauthbearer.jwks.endpoint.refresh.ms", _int64(1), 3_600_000,
                "age at which the JWKS is fetched again, before the next token is checked"),
        Setting("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", _int64(0), 100,
                "least wait before the JWKS is fetched again after a failed fetch, or early for a token whose kid it "
                "lacks; doubled each time that finds nothing new"),
        Setting("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", _int64(0), 10_000,
                "most the wait of sasl.oauthbearer.jwks.endpoint.retry.backoff.ms grows to"),
        Setting("sasl.oauthbearer.expected.issuer", _optional_text, None,
                "the iss claim a token must carry (empty: not checked)"),
        Setting("sasl.oauthbearer.expected.audience", _names, (),
                "audiences one of which a token's aud claim must name, comma-separated (empty: not checked)",
                is_list=True),
        Setting("sasl.oauthbearer.sub.claim.name", _claim_name, "sub",
                "the claim whose value is the user of the principal, User:<value>"),
        Setting("sasl.oauthbearer.scope.claim.name", _claim_name, "scope", "the claim holding the token's scopes"),
        Setting("sasl.oauthbearer.clock.skew.seconds", _int32(0), 30,
                "leeway given to a token's exp, nbf and iat against this broker's clock"),
        *(Setting(name, *spec) for name, spec in inter_broker_settings.SPECS.items()),
        Setting("authorizer.class.name", _authorizer, None,
                "the authorizer that checks every request against the ACLs in the store: Kafka's class names "
                f"({', '.join(AUTHORIZER_CLASS_NAMES)}) all name replog's; empty: none, every principal may do "
                "everything"),
        Setting("allow.everyone.if.no.acl.found", _boolean, False,
                "with an authorizer: a resource no ACL names is open to every principal (false: to super.users only)"),
        Setting(
            "metrics.listeners",
            _optional_listener,
            HostPort("127.0.0.1", DEFAULT_METRICS_PORT),
            "host:port of the Prometheus endpoint, GET /metrics (empty: no endpoint)",
        ),
        Setting(
            "metrics.per.partition.enable",
            _boolean,
            False,
            "also export per-partition series (follower lag): a series per partition and follower",
        ),
        Setting("broker.rack", _optional_text, None, "rack of this broker, for rack-aware replica assignment"),
        Setting("log.dirs", _paths, ("./replog-data",), "directories holding partition logs", is_list=True),
        Setting(
            "log.dir.min.free.bytes",
            _int64(0),
            LOG_DIR_MIN_FREE_BYTES_DEFAULT,
            "free space of the data directory below which produce is refused with KAFKA_STORAGE_ERROR (below half "
            "of it, follower appends and group commits too), until space returns (0: never refused)",
        ),
        Setting("num.partitions", _int32(1), 1, "partitions of a topic created without a count"),
        Setting(
            "default.replication.factor", _int32(1), 1, "replicas of a topic created without a factor"
        ),
        Setting("min.insync.replicas", _int32(1), 1, "ISR size an acks=all produce needs to succeed"),
        Setting(
            "auto.create.topics.enable",
            _boolean,
            False,
            "create a topic when a client asks for metadata of an unknown one (off: typos make no topics)",
        ),
        Setting("socket.request.max.bytes", _int32(1), 104_857_600, "largest request frame accepted"),
        # Connections and the memory of their requests (net/connection_limits.py, net/request_memory.py).
        # Kafka leaves the counts and bytes unlimited by default; replog bounds them.
        Setting("max.connections", _int32(1), 10_000,
                "connections open at once; at the limit, or when another would leave too few file descriptors for "
                "the broker's own files, no more are accepted until one closes"),
        Setting("max.connections.per.ip", _int32(1), 1_000,
                "connections one address may have open; one more is closed as soon as it is accepted"),
        Setting("max.connections.per.ip.overrides", _host_counts, (),
                "max.connections.per.ip for particular hosts or addresses: host:count,..."),
        Setting("connections.max.idle.ms", _int64(1), 600_000,
                "a connection that completes no request and is answered nothing for this long is closed (bytes of a "
                "request still arriving do not count)"),
        Setting("queued.max.request.bytes", _int64(1), 512 * 1024 * 1024,
                "bytes of requests being read or waiting for their answer, over all connections: past it, connections "
                "read no more requests until answers free some"),
        # Client quotas (security/quota_manager.py): the windows rates are measured over, Kafka's.
        Setting("quota.window.num", _int32(1), 11, "samples a client quota's rate is measured over"),
        Setting("quota.window.size.seconds", _int32(1), 1, "time span of each sample of a client quota's rate"),
        Setting("controller.quota.window.num", _int32(1), 11,
                "samples of the controller mutation quota: its token bucket holds this many windows of the quota"),
        Setting("controller.quota.window.size.seconds", _int32(1), 1,
                "time span of each sample of the controller mutation quota"),
        # Kafka's: 1 MiB, and the 12 bytes (offset, length) that frame a batch in the log.
        Setting("message.max.bytes", _int32(0), 1024 * 1024 + 12, "largest record batch accepted"),
        Setting("log.message.timestamp.before.max.ms", _int64(0), LONG_MAX,
                "how far before now a record's CreateTime may lie (INVALID_TIMESTAMP past it)"),
        Setting("log.message.timestamp.after.max.ms", _int64(0), 3600 * 1000,
                "how far after now a record's CreateTime may lie (INVALID_TIMESTAMP past it)"),
        Setting("log.segment.bytes", _int32(SEGMENT_BYTES_MIN), 1 << 30, "size at which a segment rolls"),
        # Kafka's counterpart is internal.segment.bytes, a hidden topic config its tests set on
        # each topic; here only the broker's operator can lower the floor, never a client.
        Setting("internal.segment.bytes.min", _int32(SEGMENT_BYTES_RUNNABLE_MIN), SEGMENT_BYTES_MIN,
                "testing only: the least segment.bytes a topic created or altered through this broker may have "
                "(Kafka's floor, 1 MiB, by default)"),
        Setting("log.roll.ms", _int64(1), 7 * _DAY_MS, "age at which a segment rolls"),
        Setting("log.retention.ms", _int64(-1), 7 * _DAY_MS, "age at which segments are deleted (-1: never)"),
        Setting(
            "log.retention.bytes",
            _int64(-1),
            -1,
            "partition size above which old segments are deleted (-1: no limit)",
        ),
        Setting(
            "log.retention.check.interval.ms",
            _int64(1),
            300_000,
            "how often each partition's log is checked for segments retention deletes",
        ),
        Setting(
            "log.flush.offset.checkpoint.interval.ms",
            _int64(1),
            60_000,
            "how often each log is flushed in the background and its recovery point saved: a restart "
            "after a crash checks what was written since",
        ),
        Setting(
            "log.index.interval.bytes",
            _int32(0),
            4096,
            "log bytes between offset index entries",
        ),
        Setting(
            "log.flush.interval.messages",
            _int64(1),
            LONG_MAX,
            "records between forced fsyncs (default: never; replication is the durability)",
        ),
        Setting("log.flush.interval.ms", _int64(0), LONG_MAX, "time between forced fsyncs (default: never)"),
        Setting("log.cleanup.policy", _cleanup_policy, ("delete",),
                "what happens to old segments: deleted by retention, compacted to the latest record per key, or both",
                is_list=True),
        Setting("log.cleaner.enable", _boolean, True, "run the log cleaner, which compacts compact topics"),
        Setting("log.cleaner.backoff.ms", _int64(1), 15_000,
                "how often the log cleaner looks for compacted logs with enough to clean"),
        Setting("log.cleaner.dedupe.buffer.size", _int64(1 << 20), 128 << 20,
                "memory one cleaning pass may use for its map of keys; a log with more distinct keys is cleaned "
                "in steps"),
        Setting("log.cleaner.delete.retention.ms", _int64(0), _DAY_MS,
                "how long a compacted log keeps a tombstone (a null value), so that consumers see the delete"),
        Setting("log.cleaner.min.cleanable.ratio", _ratio, 0.5,
                "share of a compacted log not yet cleaned at which it is cleaned"),
        Setting(
            "log.message.timestamp.type",
            _one_of("CreateTime", "LogAppendTime"),
            "CreateTime",
            "timestamp a record keeps: the producer's (CreateTime) or the broker's append time",
        ),
        Setting(
            "replica.lag.time.max.ms",
            _int64(1),
            30_000,
            "a follower that has not caught up for this long leaves the ISR (docs/design.md §5.3)",
        ),
        Setting(
            "request.timeout.ms",
            _int32(1),
            30_000,
            "how long a broker's requests to other brokers wait to be done, such as the transaction markers a "
            "partition leader writes for a transaction coordinator (docs/design.md §16.2)",
        ),
        Setting(
            "unclean.leader.election.enable",
            _boolean,
            False,
            "let a replica outside the ISR become leader when no ISR member is alive (loses data)",
        ),
        Setting(
            "auto.leader.rebalance.enable",
            _boolean,
            True,
            "move leadership back to preferred replicas (docs/design.md §4.3)",
        ),
        Setting(
            "leader.imbalance.check.interval.seconds",
            _int64(1),
            300,
            "how often leadership balance is checked (docs/design.md §4.3)",
        ),
        Setting(
            "preferred.replica.election.wait.ms",
            _int64(0),
            500,
            "head start a partition's preferred replica (or, while it is down or out of the ISR, the first live in-sync "
            "replica in assignment order) gets in leader elections (docs/design.md §4.3)",
        ),
        Setting(
            "state.change.queue.max.requests",
            _int32(1),
            10_000,
            "requests a broker's state-change queue holds before it is shrunk (docs/design.md §7.3)",
        ),
        Setting(
            "state.change.events.max",
            _int32(1),
            STATE_CHANGE_EVENTS_MAX_DEFAULT,
            "state-change lifecycle events a broker keeps in memory for `replog cluster state-changes`",
        ),
        Setting(
            "group.initial.rebalance.delay.ms",
            _int32(0),
            3000,
            "how long a group with no members waits for more to join before its first generation forms",
        ),
        Setting("group.min.session.timeout.ms", _int32(1), 6000, "shortest session timeout a group member may ask for"),
        Setting(
            "group.max.session.timeout.ms", _int32(1), 1_800_000, "longest session timeout a group member may ask for"
        ),
        Setting(
            "group.max.size",
            _int32(1),
            1000,
            "members one group may have (Kafka's default is unlimited; replog bounds every queue)",
        ),
        Setting(
            "offsets.topic.num.partitions",
            _int32(1),
            50,
            "partitions of __consumer_offsets, made on first use; a group's partition depends on it, so do not change "
            "it once the topic exists",
        ),
        Setting(
            "offsets.topic.replication.factor",
            _int32(1),
            3,
            "replicas of __consumer_offsets; fewer if fewer brokers are registered when it is made (with a warning)",
        ),
        Setting("offsets.topic.segment.bytes", _int32(14), 104_857_600,
                "segment size of __consumer_offsets: small, so that compaction soon reaches committed offsets"),
        Setting("offset.metadata.max.bytes", _int32(0), 4096, "largest metadata string an offset commit may carry"),
        Setting(
            "offsets.commit.timeout.ms",
            _int32(1),
            5000,
            "how long an offset commit waits for every in-sync replica of __consumer_offsets",
        ),
        Setting(
            "offsets.retention.minutes",
            _int32(1),
            7 * _DAY_MS // 60_000,
            "how long committed offsets of an empty group are kept (from when it became empty; for offsets "
            "committed outside any group, from their commit)",
        ),
        Setting(
            "offsets.retention.check.interval.ms",
            _int64(1),
            600_000,
            "how often the group coordinator looks for expired offsets",
        ),
        Setting(
            "transaction.state.log.num.partitions",
            _int32(1),
            50,
            "partitions of __transaction_state, made on first use; a transactional id's partition depends on it, so "
            "do not change it once the topic exists",
        ),
        Setting(
            "transaction.state.log.replication.factor",
            _int32(1),
            3,
            "replicas of __transaction_state; fewer if fewer brokers are registered when it is made (with a warning)",
        ),
        Setting("transaction.state.log.min.isr", _int32(1), 2,
                "min.insync.replicas of __transaction_state (at most its replication factor when it is made)"),
        Setting("transaction.state.log.segment.bytes", _int32(14), 104_857_600,
                "segment size of __transaction_state: small, so that compaction soon reaches ended transactions"),
        Setting(
            "transaction.max.timeout.ms",
            _int32(1),
            900_000,
            "longest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT above it)",
        ),
        Setting(
            "transactional.id.expiration.ms",
            _int32(1),
            7 * _DAY_MS,
            "how long the coordinator keeps a transactional id whose producer has sent no transactional request",
        ),
        Setting(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            _int32(1),
            10_000,
            "how often the transaction coordinator looks for transactions open past their timeout, to abort them",
        ),
        Setting(
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            _int32(1),
            3_600_000,
            "how often the transaction coordinator looks for transactional ids past transactional.id.expiration.ms",
        ),
        Setting(
            "transaction.partition.verification.enable",
            _boolean,
            True,
            "whether a partition leader asks the transaction coordinator that a transactional batch's partition "
            "was added to its transaction before appending it (KIP-890)",
        ),
    ]
}

# Kafka's topic-level names and the broker settings they default to (ServerTopicConfigSynonyms).
TOPIC_SETTING_SYNONYMS: dict[str, str] = {
    "cleanup.policy": "log.cleanup.policy",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "message.timestamp.type": "log.message.timestamp.type",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
}

# Topic settings without a broker setting here: Kafka 4's other topic configs (LogConfig), with
# Kafka's types, ranges and defaults, so that a client or tool that sets one is answered as Kafka
# answers. What each does in replog, and why some change nothing, is in the README's topic
# configuration section. Among them the replica lists of Kafka's reassignment throttle, which
# kafka-reassign-partitions --throttle sets on the moving topics (and --verify deletes): replog's
# leaders throttle the replicas a move adds, whatever these say (replica/throttle.py).
TOPIC_ONLY_SETTINGS: dict[str, Setting] = {
    setting.name: setting
    for setting in [
        Setting("leader.replication.throttled.replicas", _throttled_replicas, (),
                "accepted for Kafka's tools; a leader throttles the replicas moves add", is_list=True),
        Setting("follower.replication.throttled.replicas", _throttled_replicas, (),
                "accepted for Kafka's tools; followers are not throttled", is_list=True),
        Setting("min.compaction.lag.ms", _int64(0), 0, "how long a record stays uncompacted"),
        Setting("max.compaction.lag.ms", _int64(1), LONG_MAX,
                "how long a record may stay uncompacted, whatever the log's dirty ratio"),
        Setting("compression.type", _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
                "producer", "codec the topic's batches are stored in (producer: the producer's own)"),
        Setting("compression.gzip.level", _level(1, 9, -1), -1, "gzip level when compression.type is gzip"),
        Setting("compression.lz4.level", _level(1, 17), 9, "lz4 level when compression.type is lz4"),
        Setting("compression.zstd.level", _level(-131072, 22), 3, "zstd level when compression.type is zstd"),
        Setting("file.delete.delay.ms", _int64(0), 60_000, "accepted for Kafka's tools; deleted files go at once"),
        Setting("preallocate", _boolean, False, "accepted for Kafka's tools; segment files grow as written"),
        Setting("segment.index.bytes", _int32(4), 10 * 1024 * 1024,
                "accepted for Kafka's tools; index files grow with their segment"),
        Setting("segment.jitter.ms", _int64(0), 0, "accepted for Kafka's tools; segments roll at segment.ms"),
        Setting("max.decompressed.message.bytes", _integer(1, INT_MAX - 8), INT_MAX - 8,
                "accepted for Kafka's tools; replog bounds a whole batch's decompressed size instead"),
        Setting("errors.deadletterqueue.group.enable", _boolean, False,
                "accepted for Kafka's tools; replog has no share groups"),
        # Tiered storage: replog keeps every segment on the broker's disks, as a Kafka broker
        # with remote.log.storage.system.enable=false does, and refuses a topic that asks for it
        # (validate_topic_configs).
        Setting("remote.storage.enable", _boolean, False, "tiered storage: true is refused"),
        Setting("local.retention.ms", _int64(-2), -2, "tiered storage only"),
        Setting("local.retention.bytes", _int64(-2), -2, "tiered storage only"),
        Setting("remote.copy.lag.ms", _int64(-1), 0, "tiered storage only"),
        Setting("remote.copy.lag.bytes", _int64(-1), -1, "tiered storage only"),
        Setting("remote.log.copy.disable", _boolean, False, "tiered storage only"),
        Setting("remote.log.delete.on.disable", _boolean, False, "tiered storage only"),
    ]
}

TOPIC_SETTINGS: dict[str, Setting] = {
    name: dataclasses.replace(SETTINGS[broker_name], name=name)
    for name, broker_name in TOPIC_SETTING_SYNONYMS.items()
} | TOPIC_ONLY_SETTINGS


# Broker settings that change while brokers run (IncrementalAlterConfigs on a BROKER resource,
# kept in the store, admin/broker_configs.py), per broker or as the cluster's default; no
# default value: unset, nothing is throttled. Kafka's reassignment throttle. replog's leaders
# apply the leader rate to the replicas that moves add (replica/throttle.py); the follower rate
# is accepted, for Kafka's kafka-reassign-partitions, and shown, but replog's followers fetch
# unthrottled: the leader's throttle alone bounds a move's traffic.
LEADER_THROTTLE_RATE = "leader.replication.throttled.rate"
DYNAMIC_BROKER_SETTINGS: dict[str, Setting] = {
    setting.name: setting
    for setting in [
        Setting(LEADER_THROTTLE_RATE, _int64(1), None,
                "bytes per second this broker, as a leader, sends the replicas that moves add"),
        Setting("follower.replication.throttled.rate", _int64(1), None,
                "accepted for Kafka's tools; replog's followers are not throttled"),
    ]
}


def dynamic_broker_setting(name: str) -> Setting:
    """ConfigError for a name that cannot change while brokers run, saying which can."""
    setting = DYNAMIC_BROKER_SETTINGS.get(name)
    if setting is None:
        raise ConfigError(f"{name!r} cannot be changed while brokers run: only {', '.join(DYNAMIC_BROKER_SETTINGS)} can "
                          "(set the others in each broker's config file or with --set)")
    return setting


def parse_dynamic_broker_setting(name: str, text: str | None) -> int:
    """The value of a dynamic broker setting; ConfigError names it and says what it takes."""
    setting = dynamic_broker_setting(name)
    if text is None:
        raise ConfigError(f"{name}: give a value in bytes per second")
    return _parse(setting, text)


OAUTHBEARER_SETTING_NAMES = tuple(name for name in SETTINGS if name.startswith("sasl.oauthbearer."))
# Kafka's per-listener, per-mechanism prefix for them.


def oauthbearer_overridden(name: str) -> str | None:
    """The sasl.oauthbearer.* setting that `listener.name.<listener>.oauthbearer.sasl.oauthbearer.*`
    overrides; None for any other name."""
    return overridden_setting(name, OAUTHBEARER_SETTING_NAMES, "oauthbearer")


def oauthbearer_settings_of(settings: Mapping[str, Any], listener: str) -> dict[str, Any]:
    """The sasl.oauthbearer.* values of listener `listener`: its own where set, else the broker's."""
    return listener_values(settings, listener, OAUTHBEARER_SETTING_NAMES, "oauthbearer")


# What a listener may set for itself besides ssl.* (tls_settings.py), with Kafka's prefix
# listener.name.<lower-case name>.: the connections it holds (net/connection_limits.py).
LISTENER_SETTINGS = frozenset({"max.connections"})


def _lookup(name: str) -> Setting:
    setting = SETTINGS.get(name)
    if setting is not None:
        return setting
    overridden = (tls_settings.overridden(name) or sasl_settings.overridden(name) or oauthbearer_overridden(name)
                  or overridden_setting(name, LISTENER_SETTINGS))
    if overridden is not None:
        return dataclasses.replace(SETTINGS[overridden], name=name)
    if sasl_settings.is_jaas_config(name):
        # Read by the listener's mechanism (security/jaas.py); kept whole, as it holds passwords.
        return Setting(name, tls_settings.Secret, None, "the JAAS configuration of a listener's SASL mechanism")
    hint = ""
    if name in TOPIC_SETTING_SYNONYMS:
        hint = f"; {name} is a topic setting, its broker default is {TOPIC_SETTING_SYNONYMS[name]}"
    raise ConfigError(f"unknown setting {name!r}{hint}")


def _parse(setting: Setting, text: str, label: str = "") -> Any:
    """`label` says what the operator wrote the value as: a flag, or the setting and its source."""
    try:
        return setting.parse(text)
    except ValueError as error:
        raise ConfigError(f"{label or setting.name}: {setting.shown(text)!r} {error}") from None


def parse_setting(name: str, text: str) -> Any:
    """The value of broker setting `name` written as `text`; ConfigError names the setting."""
    return _parse(_lookup(name), text)


def parse_topic_setting(name: str, text: str, segment_bytes_min: int = SEGMENT_BYTES_MIN) -> Any:
    """The value of topic setting `name` written as `text`, segment.bytes held to
    `segment_bytes_min`; the ConfigError's message is worded as Kafka's broker words it, for
    clients and tools that show or match it."""
    setting = TOPIC_SETTINGS.get(name)
    if setting is None:
        hint = "; that is a broker setting" if name in SETTINGS else ""
        raise ConfigError(f"Unknown topic config name: {name}{hint}")
    if name == "segment.bytes":
        setting = dataclasses.replace(setting, parse=_int32(segment_bytes_min))
    try:
        return setting.parse(text)
    except ValueError as error:
        raise ConfigError(f"Invalid value {text} for configuration {name}: Value {error}") from None


# The settings Kafka types PASSWORD, whose values DescribeConfigs never tells (KIP-651's inline PEM
# included), also under a listener's or a mechanism's prefix (listener.name.<l>.<mechanism>.sasl.jaas.config).
SENSITIVE_SETTINGS = frozenset({
    "ssl.keystore.password", "ssl.key.password", "ssl.keystore.key", "ssl.keystore.certificate.chain",
    "ssl.truststore.certificates", "ssl.truststore.password", "sasl.jaas.config",
    "sasl.oauthbearer.client.credentials.client.secret", "sasl.oauthbearer.assertion.private.key.passphrase",
    "password.encoder.secret", "password.encoder.old.secret", "delegation.token.secret.key",
})


def is_sensitive(name: str) -> bool:
    """Whether DescribeConfigs answers setting `name` with a null value and is_sensitive: one
    Kafka types PASSWORD, or one replog does not know, as Kafka treats a config whose type it
    cannot tell."""
    if any(name == secret or name.endswith("." + secret) for secret in SENSITIVE_SETTINGS):
        return True
    return name not in DYNAMIC_BROKER_SETTINGS and not _is_known(name)


def _is_known(name: str) -> bool:
    try:
        _lookup(name)
    except ConfigError:
        return False
    return True


def format_value(value: Any) -> str | None:
    """A parsed value as Kafka writes it in DescribeConfigs: lists comma-joined, booleans lower case."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple) and not isinstance(value, HostPort):
        return ",".join(str(item) for item in value)
    return str(value)


def defaults() -> dict[str, Any]:
    return {name: setting.default for name, setting in SETTINGS.items()}


def topic_default(name: str) -> Any:
    """The value of topic setting `name` on a topic without overrides, on a broker left at its
    defaults: what the settings classes below (LogConfig, PartitionConfig) default to."""
    return TOPIC_SETTINGS[name].default


DEFAULT_SOURCE = "default"
SET_SOURCE = "--set"


@dataclasses.dataclass(frozen=True)
class ResolvedSettings(Mapping[str, Any]):
    """Parsed values by Kafka name (`settings["log.retention.ms"]`), and where each came from.

    A source is "default", "file <path>", "--set" or a flag ("--broker-id") for a broker
    setting; "topic" or the broker setting's own source for a topic setting.
    """

    parsed: Mapping[str, Any]
    sources: Mapping[str, str]

    def __getitem__(self, name: str) -> Any:
        return self.parsed[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.parsed)

    def __len__(self) -> int:
        return len(self.parsed)


class BrokerConfig(ResolvedSettings):
    def topic_defaults(self) -> dict[str, Any]:
        """Topic-level names and the values a topic without overrides gets from this broker."""
        return ({name: self[broker_name] for name, broker_name in TOPIC_SETTING_SYNONYMS.items()}
                | {name: setting.default for name, setting in TOPIC_ONLY_SETTINGS.items()})


class TopicSettings(ResolvedSettings):
    pass


def _flatten_toml(table: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    # `log.retention.ms = 1` in TOML is a dotted key, i.e. nested tables; `"log.retention.ms" = 1`
    # and `[log] retention.ms = 1` are the same setting, so all three spellings are accepted.
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _flatten_toml(value, f"{name}.")
        else:
            yield name, value


def _toml_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(_toml_text(item) for item in value)
    return str(value)


def _read_toml(toml_path: str) -> dict[str, str]:
    try:
        with open(toml_path, "rb") as file:
            document = tomllib.load(file)
    except OSError as error:
        raise ConfigError(f"cannot read config file {toml_path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config file {toml_path} is not valid TOML: {error}") from None
    return {name: _toml_text(value) for name, value in _flatten_toml(document)}


def load_broker_config(
    toml_path: str | None = None,
    overrides: Mapping[str, str] | None = None,
    flags: Mapping[str, tuple[str, str]] | None = None,
) -> BrokerConfig:
    """Registry defaults, then the TOML file's keys, then `--set key=value` overrides, then
    `flags`: named command-line options, setting name -> (option, text), e.g.
    `{"broker.id": ("--broker-id", "7")}`.

    Every key must be a broker setting's Kafka name; a ConfigError names the key and where it was
    written (a flag's error names the flag, which is what the operator typed). The source a
    flag's value records is the flag. `advertised.listeners` and `inter.broker.listener.name` left
    unset resolve from `listeners` (listener_settings.resolve).
    """
    values = defaults()
    sources = dict.fromkeys(values, DEFAULT_SOURCE)
    # (source, setting name -> text, whether the source alone names the setting)
    layers = [(f"file {toml_path}", _read_toml(toml_path), False)] if toml_path is not None else []
    layers.append((SET_SOURCE, dict(overrides or {}), False))
    layers.extend((option, {name: text}, True) for name, (option, text) in (flags or {}).items())
    for source, texts, names_setting in layers:
        for name, text in texts.items():
            try:
                setting = _lookup(name)
            except ConfigError as error:
                raise ConfigError(f"{error} (from {source})") from None
            values[name] = _parse(setting, text, source if names_setting else f"{name} (from {source})")
            sources[name] = source
    try:
        listener_settings.resolve(values)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    # The broker makes __consumer_offsets and __transaction_state as any topic is made, held to the
    # same floor: below it, the topic would never be made and no group or transactional id could
    # find its coordinator.
    for name in ("offsets.topic.segment.bytes", "transaction.state.log.segment.bytes"):
        if values[name] < values["internal.segment.bytes.min"]:
            raise ConfigError(f"{name} (from {sources[name]}): {values[name]} is below the least segment.bytes a "
                              f"topic may have, {values['internal.segment.bytes.min']} (internal.segment.bytes.min)")
    return BrokerConfig(types.MappingProxyType(values), types.MappingProxyType(sources))


def store_security(settings: Mapping[str, Any], environ: Mapping[str, str] = os.environ) -> StoreSecurity:
    """What this process connects to the store with, from its coord.* settings and, for the user
    and password they leave out, the environment; ConfigError names what is missing or unreadable."""
    username = settings["coord.username"] or environ.get(COORD_USERNAME_ENV) or None
    password_file = settings["coord.password.file"]
    password = environ.get(COORD_PASSWORD_ENV)
    if password_file is not None:
        try:
            with open(password_file, encoding="utf-8") as file:
                password = file.readline().rstrip("\r\n")
        except OSError as error:
            raise ConfigError(f"coord.password.file: cannot read {password_file}: {error.strerror}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"coord.password.file: {password_file} is not UTF-8 text") from None
    for name in ("coord.ssl.truststore.location", "coord.ssl.keystore.location"):
        # Read when a connection is made, from a thread of the store's client: a file that is not
        # there is said now, in one line, rather than as a connection that never comes.
        if settings[name] is not None and not os.access(settings[name], os.R_OK):
            raise ConfigError(f"{name}: cannot read {settings[name]}")
    try:
        return StoreSecurity(
            username=username,
            password=None if password is None else tls_settings.Secret(password),
            set_acl=settings["zookeeper.set.acl"],
            tls=settings["coord.ssl.client.enable"],
            truststore_location=settings["coord.ssl.truststore.location"],
            keystore_location=settings["coord.ssl.keystore.location"],
        )
    except ValueError as error:
        raise ConfigError(str(error)) from None


def validate_topic_configs(configs: Mapping[str, str], segment_bytes_min: int = SEGMENT_BYTES_MIN) -> dict[str, Any]:
    """Parse a topic's overrides (CreateTopics, AlterConfigs); ConfigError names the first bad one,
    or says which two conflict, in Kafka's words (its LogConfig.validateValues).

    A request handler answers a ConfigError with Kafka's INVALID_CONFIG (40).
    """
    parsed = {name: parse_topic_setting(name, text, segment_bytes_min) for name, text in configs.items()}
    lags = [parsed.get(name, TOPIC_ONLY_SETTINGS[name].default) for name in ("min.compaction.lag.ms", "max.compaction.lag.ms")]
    if lags[0] > lags[1]:
        raise ConfigError(f"conflict topic config setting min.compaction.lag.ms ({lags[0]}) > max.compaction.lag.ms ({lags[1]})")
    if parsed.get("remote.storage.enable"):
        raise ConfigError("Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote "
                          "log storage.")
    return parsed


TOPIC_SOURCE = "topic"


def effective_topic_config(broker_config: BrokerConfig, topic_overrides: Mapping[str, str]) -> TopicSettings:
    """Every topic setting: the topic's override where it has one, else the broker's value.

    The overrides are those the store holds, checked when they were written: a segment.bytes
    below today's floor (written before it rose, or through a broker that lowered it) still runs."""
    overrides = validate_topic_configs(topic_overrides, SEGMENT_BYTES_RUNNABLE_MIN)
    values, sources = {}, {}
    for name, setting in TOPIC_SETTINGS.items():
        if name in overrides:
            values[name], sources[name] = overrides[name], TOPIC_SOURCE
        elif name in TOPIC_SETTING_SYNONYMS:
            broker_name = TOPIC_SETTING_SYNONYMS[name]
            values[name], sources[name] = broker_config[broker_name], broker_config.sources[broker_name]
        else:
            values[name], sources[name] = setting.default, DEFAULT_SOURCE
    return TopicSettings(types.MappingProxyType(values), types.MappingProxyType(sources))
