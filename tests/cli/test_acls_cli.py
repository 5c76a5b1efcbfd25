"""`replog acls add|remove|list` through both doors: the store itself (--coord, no broker
running) and a broker in this process (--bootstrap-server). One script of commands runs through
each, and both answer it alike, word for word, with kafka-acls' options and output (Kafka 4.4's
AclCommand printed the texts expected here)."""

from __future__ import annotations

import asyncio
import json
import logging

from replog.admin.acls import describe_acls
from replog.coord_backends.memory import MemoryStore
from replog.security.acls import AclBindingFilter
from tests.cli.test_users_cli import replog
from tests.net.in_process_broker import in_process_broker

ORDERS = "ResourcePattern(resourceType=TOPIC, name=orders-, patternType=PREFIXED)"
CLICKS = "ResourcePattern(resourceType=TOPIC, name=clicks, patternType=LITERAL)"
BILLING = "ResourcePattern(resourceType=GROUP, name=billing, patternType=LITERAL)"
CAROL = "(principal=User:carol, host=10.0.0.2, operation={}, permissionType=ALLOW)"

SCRIPT: list[tuple[tuple[str, ...], str | None]] = [
    (("list", "--output", "json"), None),
    (("add", "--allow-principal", "User:alice", "--operation", "Write", "--operation", "describe", "--topic", "orders-",
      "--resource-pattern-type", "prefixed"), None),
    (("add", "--producer", "--idempotent", "--allow-principal", "User:bob", "--topic", "payments", "--transactional-id",
      "tx-1", "--output", "json"), None),
    (("add", "--consumer", "--allow-principal", "User:carol", "--allow-host", "10.0.0.2", "--topic", "clicks",
      "--group", "billing"), None),
    (("add", "--deny-principal", "User:mallory", "--topic", "*"), None),
    (("list", "--topic", "orders-1", "--resource-pattern-type", "match"), None),
    (("list", "--principal", "User:bob", "--output", "json"), None),
    (("list", "--principal", "User:carol"), None),
    (("add", "--allow-principal", "alice", "--topic", "t"), None),
    (("add", "--allow-principal", "User:dave", "--operation", "ClusterAction", "--topic", "t"), None),
    (("add", "--allow-principal", "User:dave", "--resource-pattern-type", "match", "--topic", "t"), None),
    (("add", "--allow-principal", "User:dave", "--consumer", "--topic", "t"), None),
    (("remove", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "orders-", "--resource-pattern-type",
      "prefixed", "--force", "--output", "json"), None),
    (("remove", "--topic", "payments"), "y\n"),
    (("remove", "--topic", "clicks"), "n\n"),
    (("list", "--output", "json"), None),
]


def acl(resource_type: str, name: str, principal: str, operation: str, *, pattern_type: str = "LITERAL", host: str = "*",
        permission: str = "Allow") -> dict:
    return {"resource_type": resource_type, "pattern_type": pattern_type, "name": name, "principal": principal, "host": host,
            "operation": operation, "permission": permission}


def document(key: str, acls: list[dict]) -> str:
    return json.dumps({key: acls}, indent=2) + "\n"


EXPECTED: list[tuple[int, str, str]] = [
    (0, document("acls", []), ""),
    (0, f"Adding ACLs for resource `{ORDERS}`: \n"
        " \t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)\n"
        "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n\n", ""),
    (0, document("created", [acl("Topic", "payments", "User:bob", "Write"), acl("Topic", "payments", "User:bob", "Describe"),
                             acl("Topic", "payments", "User:bob", "Create"),
                             acl("TransactionalId", "tx-1", "User:bob", "Write"),
                             acl("TransactionalId", "tx-1", "User:bob", "Describe"),
                             acl("Cluster", "kafka-cluster", "User:bob", "IdempotentWrite")]), ""),
    (0, f"Adding ACLs for resource `{CLICKS}`: \n \t{CAROL.format('READ')}\n\t{CAROL.format('DESCRIBE')}\n\n"
        f"Adding ACLs for resource `{BILLING}`: \n \t{CAROL.format('READ')}\n\n", ""),
    (0, "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=*, patternType=LITERAL)`: \n"
        " \t(principal=User:mallory, host=*, operation=ALL, permissionType=DENY)\n\n", ""),
    (0, "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=*, patternType=LITERAL)`:\n"
        "\t(principal=User:mallory, host=*, operation=ALL, permissionType=DENY)\n\n"
        f"Current ACLs for resource `{ORDERS}`:\n"
        "\t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)\n"
        "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n\n", ""),
    (0, document("acls", [acl("Topic", "payments", "User:bob", "Write"), acl("Topic", "payments", "User:bob", "Create"),
                          acl("Topic", "payments", "User:bob", "Describe"),
                          acl("Cluster", "kafka-cluster", "User:bob", "IdempotentWrite"),
                          acl("TransactionalId", "tx-1", "User:bob", "Write"),
                          acl("TransactionalId", "tx-1", "User:bob", "Describe")]), ""),
    (0, f"ACLs for principal `User:carol`\nCurrent ACLs for resource `{CLICKS}`:\n\t{CAROL.format('READ')}\n"
        f"\t{CAROL.format('DESCRIBE')}\n\nCurrent ACLs for resource `{BILLING}`:\n\t{CAROL.format('READ')}\n\n", ""),
    (1, "", "replog: ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL) (principal=alice, host=*, "
            "operation=ALL, permissionType=ALLOW): Could not parse principal from `alice` (no colon is present separating "
            "the principal type from the principal name)\n"),
    (2, "", "replog: acls add: ResourceType TOPIC only supports operations ALL,READ,WRITE,CREATE,DELETE,ALTER,DESCRIBE,"
            "DESCRIBE_CONFIGS,ALTER_CONFIGS\n"),
    (2, "", "replog: acls add: a --resource-pattern-type of match is not valid when adding acls\n"),
    (2, "", "replog: acls add: with --consumer you must specify a --group\n"),
    (0, document("deleted", [acl("Topic", "orders-", "User:alice", "Write", pattern_type="PREFIXED")]), ""),
    (0, "Are you sure you want to delete all ACLs for resource filter "
        "`ResourcePattern(resourceType=TOPIC, name=payments, patternType=LITERAL)`? (y/n)\n", ""),
    (0, f"Are you sure you want to delete all ACLs for resource filter `{CLICKS}`? (y/n)\n", ""),
    (0, document("acls", [acl("Topic", "*", "User:mallory", "All", permission="Deny"),
                          acl("Topic", "clicks", "User:carol", "Read", host="10.0.0.2"),
                          acl("Topic", "clicks", "User:carol", "Describe", host="10.0.0.2"),
                          acl("Topic", "orders-", "User:alice", "Describe", pattern_type="PREFIXED"),
                          acl("Group", "billing", "User:carol", "Read", host="10.0.0.2"),
                          acl("Cluster", "kafka-cluster", "User:bob", "IdempotentWrite"),
                          acl("TransactionalId", "tx-1", "User:bob", "Write"),
                          acl("TransactionalId", "tx-1", "User:bob", "Describe")]), ""),
]


async def run_script(door: list[str]) -> list[tuple[int, str, str]]:
    return [await replog("acls", *arguments, *door, stdin=stdin) for arguments, stdin in SCRIPT]


def check(answers: list[tuple[int, str, str]]) -> None:
    for answer, (status, out, err) in zip(answers, EXPECTED, strict=True):
        assert answer[0] == status, answer
        assert answer[1:] == (out, err), answer


async def test_both_doors_answer_the_script_alike(tmp_path, caplog):
    store_file = tmp_path / "coord" / "store.db"
    store_file.parent.mkdir()
    caplog.set_level(logging.INFO, logger="replog.audit")
    async with in_process_broker(tmp_path / "broker") as broker:
        through_store, through_broker = await asyncio.gather(  # each door's commands in order, the doors side by side
            run_script(["--coord", f"memory://{store_file}"]),
            run_script(["--bootstrap-server", f"127.0.0.1:{broker.server.port}"]))
        in_broker_store = await describe_acls(broker.store, AclBindingFilter())
    check(through_store)
    assert through_broker == through_store
    audit = [record.getMessage() for record in caplog.records if record.name == "replog.audit"]
    assert len(audit) == 12 + 4, audit  # one line per binding added or removed through the broker
    assert [line for line in audit if line.startswith("ACL deleted")][0].startswith("ACL deleted by=User:ANONYMOUS principal=User:alice")

    store = MemoryStore(str(store_file))
    await store.start()
    try:
        assert await describe_acls(store, AclBindingFilter()) == in_broker_store
    finally:
        await store.close()
