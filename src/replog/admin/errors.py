"""The admin commands' errors: one hierarchy, each carrying the Kafka error code a broker answers with.

The CLI prints the message; a request handler (CreateTopics, DeleteTopics, CreatePartitions,
AlterConfigs) puts `code` and the message in its response. Messages name the topic.
"""

from __future__ import annotations

from typing import ClassVar

from replog.coord_backends import CoordinationUnavailable, RequestRefused, SessionLost, StoreError


class AdminError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class _KafkaError(AdminError):
    CODE: ClassVar[int]

    def __init__(self, message: str):
        super().__init__(self.CODE, message)


class UnknownTopicOrPartition(_KafkaError):
    CODE = 3


class BrokerNotAvailable(_KafkaError):
    CODE = 8


class RequestTimedOut(_KafkaError):
    CODE = 7


class InvalidTopic(_KafkaError):
    CODE = 17


class TopicAlreadyExists(_KafkaError):
    CODE = 36


class InvalidPartitions(_KafkaError):
    CODE = 37


class InvalidReplicationFactor(_KafkaError):
    CODE = 38


class InvalidReplicaAssignment(_KafkaError):
    CODE = 39


class InvalidConfig(_KafkaError):
    CODE = 40


class ReassignmentInProgress(_KafkaError):
    CODE = 60


class PreferredLeaderNotAvailable(_KafkaError):
    CODE = 80


class EligibleLeadersNotAvailable(_KafkaError):
    CODE = 83


class ElectionNotNeeded(_KafkaError):
    CODE = 84


class NoReassignmentInProgress(_KafkaError):
    CODE = 85


def error_for_code(code: int, message: str) -> AdminError:
    """The AdminError a Kafka error code stands for (a broker's answer to an admin request), so
    that both doors of an admin command raise the same classes."""
    for kind in _KafkaError.__subclasses__():
        if kind.CODE == code:
            return kind(message)
    return AdminError(code, message)


class PolicyViolation(_KafkaError):
    CODE = 44


class UnknownServerError(_KafkaError):
    CODE = -1


def store_failure(subject: str, error: StoreError) -> AdminError:
    """What a broker answers when the coordination store failed an admin request: refused as too
    large (not retriable: the request must shrink), unreachable (retriable), or anything else."""
    if isinstance(error, RequestRefused):
        return PolicyViolation(f"{subject}: {error}; make the request smaller (shorter config values)")
    if isinstance(error, (CoordinationUnavailable, SessionLost)):
        return RequestTimedOut(f"{subject}: {error}")
    return UnknownServerError(f"{subject}: {error}")
