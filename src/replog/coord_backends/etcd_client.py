"""aetcd's client, with what the etcd backend needs of a secured etcd that aetcd lacks: a TLS
channel (aetcd opens plaintext channels only), with a client certificate, and a new auth token
whenever etcd stops taking the one it has.

etcd's tokens do not outlive what etcd keeps of them: a simple token (etcd's default) is
forgotten after --auth-token-ttl without use (300 s) and by every restart of the server, a JWT
at its expiry, and either is refused once the user's roles change ("revision of auth store is
old"). aetcd authenticates once, in connect(); here a call refused for its token authenticates
again and is sent once more (`refreshing_token`), and the watcher's next stream carries the
new token.
"""

from __future__ import annotations

from typing import Awaitable, Callable, TypeVar

import aetcd
import grpc
from aetcd import rpc, watcher

from .security import StoreSecurity, read_pem

T = TypeVar("T")

# What etcd answers a request whose token it no longer takes (its rpctypes: ErrGRPCInvalidAuthToken,
# ErrGRPCAuthOldRevision); aetcd's exceptions carry the same details as their message.
_TOKEN_REFUSALS = ("invalid auth token", "revision of auth store is old")
# What it answers a wrong user or password (ErrGRPCAuthFailed), and a request without a token
# (ErrGRPCUserEmpty) or whose user may not (ErrGRPCPermissionDenied).
ACCESS_REFUSALS = ("authentication failed", "user name is empty", "permission denied")


def error_details(error: BaseException) -> str:
    return (error.details() or "") if isinstance(error, rpc.AioRpcError) else str(error)


def token_refused(error: BaseException) -> bool:
    return any(refusal in error_details(error) for refusal in _TOKEN_REFUSALS)


class EtcdClient(aetcd.Client):
    def __init__(self, host: str, port: int, security: StoreSecurity, *, timeout: float, options: dict):
        super().__init__(host=host, port=port, timeout=timeout, options=options)
        self._security = security
        self._credentials = grpc.ssl_channel_credentials(
            root_certificates=read_pem(security.truststore_location),
            # One PEM file holds the key and its chain (KIP-651's keystore); each side reads its part.
            private_key=read_pem(security.keystore_location),
            certificate_chain=read_pem(security.keystore_location),
        ) if security.tls else None

    async def connect(self) -> None:
        if self._connected.is_set():
            return
        target = f"{self._host}:{self._port}"
        options = list(self._options.items())
        if self._credentials is None:
            self.channel = rpc.insecure_channel(target, options=options)
        else:
            self.channel = rpc.secure_channel(target, self._credentials, options=options)
        self.auth_stub = rpc.AuthStub(self.channel)
        self.kvstub = rpc.KVStub(self.channel)
        self.clusterstub = rpc.ClusterStub(self.channel)
        self.leasestub = rpc.LeaseStub(self.channel)
        self.maintenancestub = rpc.MaintenanceStub(self.channel)
        self._watcher = watcher.Watcher(rpc.WatchStub(self.channel), timeout=self._timeout)
        if self._security.username is not None:
            await self.authenticate()
        self._connected.set()

    async def authenticate(self) -> None:
        request = rpc.AuthenticateRequest(name=self._security.username, password=str.__str__(self._security.password))
        reply = await self.auth_stub.Authenticate(request, timeout=self._timeout)
        self.metadata = (("token", reply.token),)
        self._watcher._metadata = self.metadata

    async def refreshing_token(self, call: Callable[[], Awaitable[T]]) -> T:
        """`call()`, and once more with a new token if etcd refused its token."""
        try:
            return await call()
        except Exception as error:
            if self._security.username is None or not token_refused(error):
                raise
        await self.authenticate()
        return await call()
