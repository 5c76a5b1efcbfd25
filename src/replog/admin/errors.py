"""The admin commands' errors: one hierarchy, each carrying the Kafka error code a broker answers with.

The CLI prints the message; a request handler (CreateTopics, DeleteTopics, CreatePartitions,
AlterConfigs) puts `code` and the message in its response. Messages name the topic.
"""

from __future__ import annotations

from typing import ClassVar

from kio.schema.errors import ErrorCode

from replog.coord_backends import CoordinationUnavailable, RequestRefused, SessionLost, StoreError


class AdminError(Exception):
    """`code`: a kio ErrorCode, or a client library's own code (librdkafka's negative ones) for
    a failure no broker answered."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class _KafkaError(AdminError):
    code: ClassVar[ErrorCode]

    def __init__(self, message: str):
        super().__init__(type(self).code, message)


class UnknownTopicOrPartition(_KafkaError):
    code = ErrorCode.unknown_topic_or_partition


class BrokerNotAvailable(_KafkaError):
    code = ErrorCode.broker_not_available


class RequestTimedOut(_KafkaError):
    code = ErrorCode.request_timed_out


class InvalidTopic(_KafkaError):
    code = ErrorCode.invalid_topic_exception


class TopicAlreadyExists(_KafkaError):
    code = ErrorCode.topic_already_exists


class InvalidPartitions(_KafkaError):
    code = ErrorCode.invalid_partitions


class InvalidReplicationFactor(_KafkaError):
    code = ErrorCode.invalid_replication_factor


class InvalidReplicaAssignment(_KafkaError):
    code = ErrorCode.invalid_replica_assignment


class InvalidConfig(_KafkaError):
    code = ErrorCode.invalid_config


class ReassignmentInProgress(_KafkaError):
    code = ErrorCode.reassignment_in_progress


class PreferredLeaderNotAvailable(_KafkaError):
    code = ErrorCode.preferred_leader_not_available


class EligibleLeadersNotAvailable(_KafkaError):
    code = ErrorCode.eligible_leaders_not_available


class ElectionNotNeeded(_KafkaError):
    code = ErrorCode.election_not_needed


class NoReassignmentInProgress(_KafkaError):
    code = ErrorCode.no_reassignment_in_progress


def error_for_code(code: int, message: str) -> AdminError:
    """The AdminError a Kafka error code stands for (a broker's answer to an admin request), so
    that both doors of an admin command raise the same classes."""
    for kind in _KafkaError.__subclasses__():
        if kind.code == code:
            return kind(message)
    return AdminError(code, message)


class PolicyViolation(_KafkaError):
    code = ErrorCode.policy_violation


class UnknownServerError(_KafkaError):
    code = ErrorCode.unknown_server_error


def store_failure(subject: str, error: StoreError) -> AdminError:
    """What a broker answers when the coordination store failed an admin request: refused as too
    large (not retriable: the request must shrink), unreachable (retriable), or anything else."""
    if isinstance(error, RequestRefused):
        return PolicyViolation(f"{subject}: {error}; make the request smaller (shorter config values)")
    if isinstance(error, (CoordinationUnavailable, SessionLost)):
        return RequestTimedOut(f"{subject}: {error}")
    return UnknownServerError(f"{subject}: {error}")
