"""The chaos runs use the replication tests' cluster over a coordination server of their own,
since one of their faults restarts it."""

from tests.cluster.conftest import private_cluster  # noqa: F401  (a fixture, found by name)
