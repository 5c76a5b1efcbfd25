"""Client-side tools over confluent-kafka: console produce/consume and perf tests, the
counterparts of Kafka's kafka-console-* and *-perf-test scripts. They talk to brokers only
through the Kafka protocol, never through replog's own modules."""

from replog.tools.consume import StartPosition, consume, start_position
from replog.tools.kafka_client import ACKS_CHOICES, COMPRESSION_CHOICES, DEFAULT_KEY_SEPARATOR, BadArguments, ToolError
from replog.tools.perf import ConsumeReport, LatencyReport, ProduceRun, perf_consume, perf_end_to_end, perf_produce
from replog.tools.produce import produce_lines

__all__ = [
    "ACKS_CHOICES",
    "COMPRESSION_CHOICES",
    "DEFAULT_KEY_SEPARATOR",
    "BadArguments",
    "ConsumeReport",
    "LatencyReport",
    "ProduceRun",
    "StartPosition",
    "ToolError",
    "consume",
    "perf_consume",
    "perf_end_to_end",
    "perf_produce",
    "produce_lines",
    "start_position",
]
