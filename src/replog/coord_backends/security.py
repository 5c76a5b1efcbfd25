"""What a connection to the coordination store proves and asks for: a user and password
(ZooKeeper's SASL DIGEST-MD5; etcd's RBAC users), znode ACLs on what it creates (ZooKeeper), and
TLS with a client certificate (either store).

The password is handed in as read from its file or the environment (replog.coord_settings);
nothing here prints it: the dataclass leaves it out of its repr, and errors name the user only.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class StoreSecurity:
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    # ZooKeeper: every node created gets an ACL that only the creating user (and ZooKeeper's
    # super user) may read or change; Kafka's zookeeper.set.acl, without its world-readable nodes.
    set_acl: bool = False
    tls: bool = False
    truststore_location: str | None = None  # PEM: the CAs the server's certificate is checked against
    keystore_location: str | None = None  # PEM: the client's private key and certificate chain

    def __post_init__(self):
        if (self.username is None) != (self.password is None):
            raise ValueError("a store user needs a password and a password a user: give both or neither")
        if self.set_acl and self.username is None:
            raise ValueError("zookeeper.set.acl needs a store user (coord.username): the ACLs name it")
        if not self.tls and (self.truststore_location or self.keystore_location):
            raise ValueError("coord.ssl.* files are given but coord.ssl.client.enable is false")



NO_SECURITY = StoreSecurity()


def read_pem(location: str | None) -> bytes | None:
    if location is None:
        return None
    try:
        with open(location, "rb") as file:
            return file.read()
    except OSError as error:
        raise ValueError(f"cannot read {location}: {error.strerror}") from None
