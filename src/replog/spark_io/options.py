"""Every option of the `replog` source and sink: names, defaults and validation in one place.

Names and meanings are those of Spark's Kafka source and sink (structured-streaming-kafka-
integration), so that a query moving from `kafka` changes only the format name. Kafka client
settings are accepted with or without the `kafka.` prefix; among them the security ones, in the
names of Spark's connector (Java's: `kafka.security.protocol`, `kafka.sasl.jaas.config`,
`kafka.ssl.truststore.location`...) or librdkafka's (`kafka.sasl.username`, `kafka.ssl.ca.location`...),
checked as a `--command-config` file is (net/client_properties.py). Anything else, and any bad value,
fails at load() (or at the writer's creation) with an OptionError naming the option: Spark hands
options over lower-cased, so messages use the documented spelling.

Options Spark's Kafka source accepts but that mean nothing without consumer groups
(`groupIdPrefix`, `kafka.group.id`) are accepted and ignored, so that existing queries run
unchanged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from replog.net.client_properties import KNOWN_KEYS as SECURITY_OPTIONS
from replog.net.client_properties import NO_PROPERTIES, ClientProperties, ClientPropertiesError, client_properties

from .offsets import EARLIEST, LATEST, TopicPartition

SOURCE = "replog"

_CLIENT_PREFIX = "kafka."
_IGNORED = ("groupIdPrefix", "group.id")
# Spark passes these to every source or sink it creates; they are not ours to validate.
_SPARK_PASSED = ("path", "checkpointlocation")


class OptionError(ValueError):
    """An option is unknown, missing, contradicts another, or has a bad value."""


@dataclass(frozen=True)
class ClientSettings:
    """How to reach the cluster (the Kafka client settings the connector uses)."""

    bootstrap: tuple[tuple[str, int], ...]
    client_id: str = SOURCE
    request_timeout_ms: int = 30_000
    fetch_max_bytes: int = 50 * 1024 * 1024
    max_partition_fetch_bytes: int = 1024 * 1024
    security: ClientProperties = NO_PROPERTIES

    @property
    def fetch_bytes(self) -> int:
        """What one fetch of one partition asks for (the first batch comes whatever its size)."""
        return min(self.fetch_max_bytes, self.max_partition_fetch_bytes)


@dataclass(frozen=True)
class Subscription:
    """Which partitions to read: listed topics, topics matching a pattern, or listed partitions."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def topics_to_describe(self) -> list[str] | None:
        """Topic names to ask the cluster about; None for every topic (pattern)."""
        if self.pattern is not None:
            return None
        return sorted(set(self.topics) | {tp.topic for tp in self.assigned})

    def select(self, partitions_by_topic: Mapping[str, int]) -> list[TopicPartition]:
        """The subscribed partitions among the cluster's topics (name -> partition count), sorted."""
        if self.assigned:
            return sorted(tp for tp in self.assigned if tp.partition < partitions_by_topic.get(tp.topic, 0))
        if self.pattern is not None:
            matcher = re.compile(self.pattern)
            names = [name for name in partitions_by_topic if matcher.fullmatch(name)]  # Java's matches(): whole name
        else:
            names = [name for name in self.topics if name in partitions_by_topic]
        return sorted(TopicPartition(name, index) for name in names for index in range(partitions_by_topic[name]))


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends. Exactly one form applies, in Spark's order of precedence:
    one timestamp for every partition, timestamps per partition, offsets per partition, or
    `default` (EARLIEST or LATEST) for every partition."""

    default: int
    offsets: Mapping[TopicPartition, int] | None = None  # -2 earliest, -1 latest, else an offset
    timestamps: Mapping[TopicPartition, int] | None = None
    timestamp: int | None = None


@dataclass(frozen=True)
class ReadOptions:
    client: ClientSettings
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec  # batch queries only
    timestamp_not_found_latest: bool = False  # startingOffsetsByTimestampStrategy=latest
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000


@dataclass(frozen=True)
class WriteOptions:
    client: ClientSettings
    topic: str | None = None
    batch_bytes: int = 1024 * 1024
    compression: str = "none"


_READ_SOURCE_OPTIONS = {
    name.lower(): name
    for name in (
        "subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets", "startingTimestamp",
        "endingTimestamp", "startingOffsetsByTimestamp", "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy",
        "maxOffsetsPerTrigger", "minPartitions", "failOnDataLoss", "includeHeaders", "kafkaConsumer.pollTimeoutMs",
        "groupIdPrefix",
    )
}
_READ_CLIENT_OPTIONS = ("bootstrap.servers", "client.id", "request.timeout.ms", "fetch.max.bytes", "max.partition.fetch.bytes", "group.id",
                        *sorted(SECURITY_OPTIONS))
_WRITE_SOURCE_OPTIONS = {name.lower(): name for name in ("topic", "includeHeaders")}
_WRITE_CLIENT_OPTIONS = ("bootstrap.servers", "client.id", "request.timeout.ms", "acks", "batch.size", "compression.type",
                         *sorted(SECURITY_OPTIONS))
COMPRESSIONS = ("none", "gzip")


def parse_read_options(options: Mapping[str, str], *, streaming: bool | None) -> ReadOptions:
    """Read options for a streaming (True) or batch (False) query; None, at load(), when that
    is not known yet: everything is checked but what only one kind of query refuses."""
    source, client = _split(options, _READ_SOURCE_OPTIONS, _READ_CLIENT_OPTIONS)
    subscription = _subscription(source)
    if streaming is True:
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if name in source:
                raise OptionError(f"option '{name}' is not valid in streaming queries")
    starting = _offset_spec(source, "starting", default=LATEST if streaming else EARLIEST, streaming=streaming)
    ending = _offset_spec(source, "ending", default=LATEST, streaming=streaming)
    strategy = source.get("startingOffsetsByTimestampStrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', got {strategy!r}")
    return ReadOptions(
        client=_client_settings(client),
        subscription=subscription,
        starting=starting,
        ending=ending,
        timestamp_not_found_latest=strategy == "latest",
        max_offsets_per_trigger=_positive_int(source, "maxOffsetsPerTrigger"),
        min_partitions=_positive_int(source, "minPartitions"),
        fail_on_data_loss=_bool(source, "failOnDataLoss", True),
        include_headers=_bool(source, "includeHeaders", False),
        poll_timeout_ms=_positive_int(source, "kafkaConsumer.pollTimeoutMs") or 120_000,
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    source, client = _split(options, _WRITE_SOURCE_OPTIONS, _WRITE_CLIENT_OPTIONS)
    _bool(source, "includeHeaders", False)  # the sink writes a `headers` column whenever there is one
    acks = client.get("acks", "all")
    if acks not in ("all", "-1"):
        raise OptionError(f"option 'kafka.acks' must be 'all' (the replog sink writes with acks=all), got {acks!r}")
    compression = client.get("compression.type", "none")
    if compression not in COMPRESSIONS:
        raise OptionError(f"option 'kafka.compression.type' must be one of {', '.join(COMPRESSIONS)}, got {compression!r}")
    topic = source.get("topic")
    if topic is not None and not topic.strip():
        raise OptionError("option 'topic' must not be empty")
    return WriteOptions(
        client=_client_settings(client),
        topic=topic,
        batch_bytes=_positive_int(client, "batch.size", "kafka.batch.size") or 1024 * 1024,
        compression=compression,
    )


def _split(options: Mapping[str, str], source_names: dict[str, str], client_names: tuple[str, ...]) -> tuple[dict, dict]:
    """Options by documented name: the source's own, and the client settings (prefix dropped)."""
    source: dict[str, str] = {}
    client: dict[str, str] = {}
    for given, value in options.items():
        key = given.lower()
        bare = key.removeprefix(_CLIENT_PREFIX)
        if key in source_names:
            source[source_names[key]] = value
        elif bare in client_names:
            if bare in client:
                raise OptionError(f"option '{bare}' is given both with and without the 'kafka.' prefix")
            client[bare] = value
        elif key not in _SPARK_PASSED:
            known = sorted([*source_names.values(), *(_CLIENT_PREFIX + name for name in client_names)])
            raise OptionError(f"unknown option '{given}' for the {SOURCE} data source; known: {', '.join(known)}")
    for ignored in _IGNORED:
        source.pop(ignored, None)
        client.pop(ignored, None)
    return source, client


def _client_settings(client: dict[str, str]) -> ClientSettings:
    servers = client.get("bootstrap.servers", "").strip()
    if not servers:
        raise OptionError("option 'kafka.bootstrap.servers' (or 'bootstrap.servers') must be specified")
    bootstrap = []
    for server in servers.split(","):
        host, _, port = server.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise OptionError(f"option 'kafka.bootstrap.servers' must list host:port pairs, got {server.strip()!r}")
        bootstrap.append((host, int(port)))
    try:
        security = client_properties({name: value for name, value in client.items() if name in SECURITY_OPTIONS})
    except ClientPropertiesError as error:
        raise OptionError(f"the Kafka client's security options (kafka.*): {error}") from None
    return ClientSettings(
        bootstrap=tuple(bootstrap),
        client_id=client.get("client.id", SOURCE),
        request_timeout_ms=_positive_int(client, "request.timeout.ms", "kafka.request.timeout.ms") or 30_000,
        fetch_max_bytes=_positive_int(client, "fetch.max.bytes", "kafka.fetch.max.bytes") or 50 * 1024 * 1024,
        max_partition_fetch_bytes=_positive_int(client, "max.partition.fetch.bytes", "kafka.max.partition.fetch.bytes") or 1024 * 1024,
        security=security,
    )


def _subscription(source: dict[str, str]) -> Subscription:
    given = [name for name in ("subscribe", "subscribePattern", "assign") if name in source]
    if len(given) != 1:
        raise OptionError("exactly one of the options 'subscribe', 'subscribePattern', 'assign' must be specified"
                          + (f"; got {', '.join(given)}" if given else ""))
    (kind,) = given
    value = source[kind]
    if kind == "subscribe":
        topics = tuple(name.strip() for name in value.split(",") if name.strip())
        if not topics:
            raise OptionError("option 'subscribe' must list at least one topic")
        return Subscription(topics=topics)
    if kind == "subscribePattern":
        try:
            re.compile(value)
        except re.error as error:
            raise OptionError(f"option 'subscribePattern' is not a valid regular expression: {error}") from None
        return Subscription(pattern=value)
    assigned = _json_object(source, "assign")
    try:
        partitions = tuple(TopicPartition(topic, int(index)) for topic, indexes in assigned.items() for index in indexes)
    except (TypeError, ValueError):
        partitions = ()
    if not partitions or any(tp.partition < 0 for tp in partitions):
        raise OptionError(f'option \'assign\' must be JSON like {{"topicA":[0,1]}}, got {value!r}')
    return Subscription(assigned=partitions)


def _offset_spec(source: dict[str, str], side: str, *, default: int, streaming: bool | None) -> OffsetSpec:
    """startingOffsets/endingOffsets and their by-timestamp forms, in Spark's precedence."""
    timestamp_name, by_timestamp_name, offsets_name = f"{side}Timestamp", f"{side}OffsetsByTimestamp", f"{side}Offsets"
    if timestamp_name in source:
        return OffsetSpec(default, timestamp=_non_negative_long(timestamp_name, source[timestamp_name]))
    if by_timestamp_name in source:
        timestamps = {tp: _non_negative_long(by_timestamp_name, value) for tp, value in _partition_json(source, by_timestamp_name).items()}
        return OffsetSpec(default, timestamps=timestamps)
    value = source.get(offsets_name)
    if value is None:
        return OffsetSpec(default)
    word = value.strip().lower()
    batch_refused = "latest" if side == "starting" else "earliest"
    if word in ("earliest", "latest"):
        if streaming is False and word == batch_refused:
            raise OptionError(f"option '{offsets_name}' cannot be {word!r} for batch queries")
        return OffsetSpec(EARLIEST if word == "earliest" else LATEST)
    offsets = {}
    for tp, offset in _partition_json(source, offsets_name).items():
        if not isinstance(offset, int) or offset < EARLIEST:
            raise OptionError(f"option '{offsets_name}': offset for {tp} must be -2 (earliest), -1 (latest) or >= 0, got {offset!r}")
        if streaming is False and offset == (LATEST if side == "starting" else EARLIEST):
            raise OptionError(f"option '{offsets_name}': offset for {tp} cannot be {batch_refused} ({offset}) for batch queries")
        offsets[tp] = offset
    return OffsetSpec(default, offsets=offsets)


def _partition_json(source: dict[str, str], name: str) -> dict[TopicPartition, object]:
    parsed = _json_object(source, name)
    try:
        return {TopicPartition(topic, int(index)): value for topic, values in parsed.items() for index, value in values.items()}
    except (AttributeError, ValueError):
        raise OptionError(f'option \'{name}\' must be JSON like {{"topicA":{{"0":23,"1":-1}}}}, got {source[name]!r}') from None


def _json_object(source: dict[str, str], name: str) -> dict:
    try:
        parsed = json.loads(source[name])
    except json.JSONDecodeError as error:
        raise OptionError(f"option '{name}' is not valid JSON: {error}") from None
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError(f"option '{name}' must be a non-empty JSON object, got {source[name]!r}")
    return parsed


def _positive_int(options: dict[str, str], key: str, name: str | None = None) -> int | None:
    value = options.get(key)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise OptionError(f"option '{name or key}' must be a positive integer, got {value!r}")
    return number


def _non_negative_long(name: str, value: object) -> int:
    try:
        number = int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = -1
    if number < 0:
        raise OptionError(f"option '{name}' must hold timestamps in milliseconds (>= 0), got {value!r}")
    return number


def _bool(options: dict[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise OptionError(f"option '{name}' must be 'true' or 'false', got {value!r}")
    return value.strip().lower() == "true"
