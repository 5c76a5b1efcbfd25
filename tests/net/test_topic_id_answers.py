"""Topic ids in answers (KIP-516): Metadata, CreateTopics and DeleteTopics name a topic by the id
drawn when it was created, the one its logs are tagged with, and a topic deleted and created
again under its name has a new one; Metadata and DeleteTopics find a topic by its id alone.
Raw requests to a broker process."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from replog.net.codec import ApiKey, decode_response
from replog.storage.partition_metadata import tagged_topic_id
from tests.hostile.seeds import encode as encode_request
from tests.net.served_broker import served_broker  # noqa: F401  (the fixture)
from tests.net.test_nullable_fields import exchange
from tests.support.polling import wait_until

pytestmark = pytest.mark.cluster  # each test asks the module's broker process (served_broker)

TOPIC = "with-ids"


def call(broker, api_key: int, version: int, values: dict):
    return decode_response(api_key, version, exchange(broker.port, encode_request(api_key, version, values)))[1]


def create(broker, name: str) -> object:
    [result] = call(broker, ApiKey.CREATE_TOPICS, 7, {"timeout": 10_000, "validate_only": False, "topics": [
        {"name": name, "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}]}).topics
    assert result.error_code == ErrorCode.none
    return result


def metadata(broker, *asked: str | uuid.UUID) -> list:
    """Metadata version 12 of the topics `asked`, each by name or by id alone."""
    return list(call(broker, ApiKey.METADATA, 12, {"topics": [
        {"name": None, "topic_id": named} if isinstance(named, uuid.UUID) else {"name": named, "topic_id": None}
        for named in asked], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}).topics)


def test_topics_are_answered_with_the_id_their_logs_are_tagged_with(served_broker):  # noqa: F811
    created = create(served_broker, TOPIC)
    assert created.topic_id not in (None, uuid.UUID(int=0))
    tagged = wait_until(lambda: tagged_topic_id(served_broker.data_dir / f"{TOPIC}-0"), "the log's topic id tag", 10)
    assert created.topic_id == uuid.UUID(hex=tagged)
    [by_name] = metadata(served_broker, TOPIC)
    assert (by_name.error_code, by_name.topic_id) == (ErrorCode.none, created.topic_id)
    [by_id] = metadata(served_broker, created.topic_id)
    assert (by_id.error_code, by_id.name, by_id.topic_id, len(by_id.partitions)) == (ErrorCode.none, TOPIC, created.topic_id, 2)


def test_a_topic_deleted_and_created_again_has_a_new_id(served_broker):  # noqa: F811
    name = "recreated"
    first = create(served_broker, name).topic_id
    [deleted] = call(served_broker, ApiKey.DELETE_TOPICS, 6, {"timeout": 10_000, "topics": [
        {"name": None, "topic_id": first}]}).responses
    assert (deleted.error_code, deleted.name, deleted.topic_id) == (ErrorCode.none, name, first)
    [gone] = metadata(served_broker, first)
    assert (gone.error_code, gone.name, gone.topic_id) == (ErrorCode.unknown_topic_id, None, first)
    second = create(served_broker, name).topic_id
    assert second not in (None, uuid.UUID(int=0), first)
    [answered] = metadata(served_broker, name)
    assert answered.topic_id == second
    [by_name] = call(served_broker, ApiKey.DELETE_TOPICS, 6, {"timeout": 10_000, "topics": [
        {"name": name, "topic_id": None}]}).responses
    assert (by_name.error_code, by_name.topic_id) == (ErrorCode.none, second)


def test_an_unknown_id_is_answered_unknown_with_the_id_asked(served_broker):  # noqa: F811
    unknown = uuid.uuid4()
    [answered] = metadata(served_broker, unknown)
    assert (answered.error_code, answered.name, answered.topic_id) == (ErrorCode.unknown_topic_id, None, unknown)
    [deleted] = call(served_broker, ApiKey.DELETE_TOPICS, 6, {"timeout": 10_000, "topics": [
        {"name": None, "topic_id": unknown}]}).responses
    assert (deleted.error_code, deleted.name, deleted.topic_id) == (ErrorCode.unknown_topic_id, None, unknown)
