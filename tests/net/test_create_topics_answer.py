"""CreateTopics answers, as Kafka does from v5, the created topic's partition count, replication
factor and every config with its source: Java's Admin reads the configs whenever the partition
count is there, and a topic created without them failed there though it existed."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from replog.net.codec import ApiKey, decode_response
from tests.hostile.seeds import encode as encode_request
from tests.net.served_broker import served_broker  # noqa: F401  (the fixture)
from tests.net.test_nullable_fields import exchange

pytestmark = pytest.mark.cluster  # each test asks the module's broker process (served_broker)

DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5


@pytest.mark.parametrize("validate_only", [True, False])
def test_create_topics_answers_the_topics_configs(served_broker, validate_only):
    frame = encode_request(ApiKey.CREATE_TOPICS, 7, {"timeout": 10_000, "validate_only": validate_only, "topics": [
        {"name": f"t-{uuid.uuid4().hex[:10]}", "num_partitions": 2, "replication_factor": 1, "assignments": [],
         "configs": [{"name": "retention.ms", "value": "123456"}]}]})
    _, body = decode_response(ApiKey.CREATE_TOPICS, 7, exchange(served_broker.port, frame))
    [topic] = body.topics
    assert (topic.error_code, topic.num_partitions, topic.replication_factor) == (ErrorCode.none, 2, 1)
    configs = {config.name: (config.value, config.config_source) for config in topic.configs}
    assert configs["retention.ms"] == ("123456", DYNAMIC_TOPIC_CONFIG)
    assert configs["cleanup.policy"] == ("delete", DEFAULT_CONFIG)
    assert "max.message.bytes" in configs
