"""SASL for Kafka clients: PLAIN and SCRAM-SHA-256/512, each SASL user served as a Quiver ACL user.

--sasl-users names a JSON file (mode 0600, like every secret the services read):

    {"<user>": {"password": "<password>", "credentials": "<that Quiver user's key file>"}}

A connection authenticates first (SaslHandshake v1, then SaslAuthenticate); until then only
ApiVersions and those two are answered, anything else closes it, as a Kafka broker does. Once
authenticated, every request of the connection goes through SDK clients holding the user's
CURVE key, so the cluster's ACL decides as for the user's own SDK: topic PUB/SUB, group SUB,
admin. A refusal comes back as the API's authorization error (TOPIC_AUTHORIZATION_FAILED ...).
SCRAM salts are drawn when the gateway starts (the file keeps the password, not a SCRAM hash).
"""

import base64
import hashlib
import hmac
import os

from quiver.wire.curve import load_secret_map

from .protocol import NONE, SASL_AUTHENTICATE, SASL_HANDSHAKE

UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = 33, 34, 58
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_ITERATIONS = 4096
MAX_USERS = 10_000


def load_users(path: str) -> dict:
    """--sasl-users as {user: (password, Credentials)}; ValueError saying what is wrong."""
    return load_secret_map(path, "--sasl-users", "password", MAX_USERS)


class Session:
    """One connection's SASL exchange; `user` once authenticated."""

    def __init__(self, users: dict):
        self.users = users
        self.mechanism = None
        self.user = None
        self._scram = None   # (user, client-first-bare, server-first, salted password, hash name)

    def apis(self) -> dict:
        return {SASL_HANDSHAKE: self.handshake, SASL_AUTHENTICATE: self.authenticate}

    def handshake(self, body) -> dict:
        if body.mechanism not in MECHANISMS:
            return {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": list(MECHANISMS)}
        self.mechanism = body.mechanism
        return {"error_code": NONE, "mechanisms": list(MECHANISMS)}

    def authenticate(self, body) -> dict:
        out = {"error_code": NONE, "error_message": None, "auth_bytes": b"", "session_lifetime": 0}
        if self.mechanism is None or self.user is not None:
            return {**out, "error_code": ILLEGAL_SASL_STATE, "error_message": "SaslHandshake first, once"}
        token = bytes(body.auth_bytes)
        try:
            if self.mechanism == "PLAIN":
                return self._plain(token, out)
            return self._scram_step(token, out)
        except (ValueError, UnicodeDecodeError, KeyError):
            return self._failed(out)

    def _failed(self, out) -> dict:
        self._scram = None
        return {**out, "error_code": SASL_AUTHENTICATION_FAILED,
                "error_message": "authentication failed: unknown user or wrong password"}

    def _plain(self, token: bytes, out) -> dict:
        _authzid, user, password = token.decode().split("\0")
        known = self.users.get(user)
        if known is None or not hmac.compare_digest(known[0].encode(), password.encode()):
            return self._failed(out)
        self.user = user
        return out

    def _scram_step(self, token: bytes, out) -> dict:
        algo = "sha256" if self.mechanism == "SCRAM-SHA-256" else "sha512"
        msg = token.decode()
        if self._scram is None:                               # client-first: n,,n=user,r=nonce
            gs2, _, bare = msg.partition(",,")
            attrs = dict(a.split("=", 1) for a in bare.split(","))
            user = attrs["n"].replace("=2C", ",").replace("=3D", "=")
            if user not in self.users or not gs2.startswith("n"):
                return self._failed(out)
            salt = _salt(user, algo)
            nonce = attrs["r"] + base64.b64encode(os.urandom(18)).decode()
            server_first = f"r={nonce},s={base64.b64encode(salt).decode()},i={SCRAM_ITERATIONS}"
            salted = hashlib.pbkdf2_hmac(algo, self.users[user][0].encode(), salt, SCRAM_ITERATIONS)
            self._scram = (user, bare, server_first, salted, algo, nonce)
            return {**out, "auth_bytes": server_first.encode()}
        user, first_bare, server_first, salted, algo, nonce = self._scram
        without_proof, _, proof = msg.rpartition(",p=")
        if dict(a.split("=", 1) for a in without_proof.split(","))["r"] != nonce:
            return self._failed(out)
        auth_message = f"{first_bare},{server_first},{without_proof}".encode()
        client_key = hmac.digest(salted, b"Client Key", algo)
        stored_key = hashlib.new(algo, client_key).digest()
        signature = hmac.digest(stored_key, auth_message, algo)
        given = base64.b64decode(proof)
        if len(given) != len(signature) or not hmac.compare_digest(
                hashlib.new(algo, bytes(a ^ b for a, b in zip(given, signature))).digest(), stored_key):
            return self._failed(out)
        server_key = hmac.digest(salted, b"Server Key", algo)
        self.user, self._scram = user, None
        return {**out, "auth_bytes": b"v=" + base64.b64encode(hmac.digest(server_key, auth_message, algo))}


_SALTS: dict = {}


def _salt(user: str, algo: str) -> bytes:
    """The user's SCRAM salt for this gateway's life (one per user and hash, drawn once)."""
    return _SALTS.setdefault((user, algo), os.urandom(16))
