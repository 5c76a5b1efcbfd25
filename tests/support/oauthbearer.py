"""OAUTHBEARER test material: signing keys made here with cryptography, the JWTs they sign, and a
JWKS served over HTTP on loopback by a server the test starts and stops."""

from __future__ import annotations

import http.server
import json
import threading
import time
import uuid
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

ISSUER = "https://issuer.example"
AUDIENCE = "replog"


class SigningKey:
    """A key pair an identity provider signs with: `jwk` is what its JWKS publishes."""

    def __init__(self, algorithm: str = "RS256", kid: str | None = None) -> None:
        self.algorithm = algorithm
        self.kid = kid or uuid.uuid4().hex[:8]
        if algorithm.startswith("ES"):
            curve = {"ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}[algorithm]
            self.private_key = ec.generate_private_key(curve)
            self.jwk = ECAlgorithm.to_jwk(self.private_key.public_key(), as_dict=True)
        else:
            self.private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            self.jwk = RSAAlgorithm.to_jwk(self.private_key.public_key(), as_dict=True)
        self.jwk |= {"kid": self.kid, "use": "sig"}

    def token(self, subject: str = "alice", lifetime_s: float = 300, **claims: Any) -> str:
        """A token for `subject` issued now by ISSUER for AUDIENCE; `claims` add to or replace those
        (None removes one)."""
        now = time.time()
        payload = {"sub": subject, "iss": ISSUER, "aud": AUDIENCE, "iat": int(now), "exp": int(now + lifetime_s),
                   "scope": "produce consume"} | claims
        return jwt.encode({name: value for name, value in payload.items() if value is not None},
                          self.private_key, algorithm=self.algorithm, headers={"kid": self.kid})


def jwks(*keys: SigningKey) -> dict:
    return {"keys": [key.jwk for key in keys]}


class JwksServer:
    """An HTTP server on 127.0.0.1 answering GET with `document` (JSON); counts the GETs."""

    def __init__(self, document: dict) -> None:
        self.document = document
        self.requests = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                server.requests += 1
                body = json.dumps(server.document).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/jwks.json"

    def __enter__(self) -> JwksServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()
