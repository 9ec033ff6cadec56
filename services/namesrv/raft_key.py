"""The controllers' Raft key: read from --controller-key-file (made by `quiver auth
controller-key`), or derived from the auth dir's server secret. No key, no controller: the Raft
traffic is never plain. The config checks it too (no Raft library needed for that)."""

import hashlib
import hmac
import os
import stat

from quiver.wire.curve import AuthDir


def read_key_file(path: str) -> str:
    """The key `quiver auth controller-key` wrote (64 hex digits), refused when others may read it."""
    st = os.stat(path)
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValueError(f"{path} is readable by others (mode {stat.S_IMODE(st.st_mode):04o}): chmod 600 it")
    with open(path, encoding="ascii") as f:
        key = f.read().strip()
    if len(key) < 32 or any(c not in "0123456789abcdef" for c in key.lower()):
        raise ValueError(f"{path} holds no Raft key (64 hex digits; make one: quiver auth controller-key FILE)")
    return key


def raft_password(config) -> str:
    """The key every Raft message is encrypted and authenticated with (pysyncobj: Fernet, from
    PBKDF2 of it): --controller-key-file, else derived from the auth dir's server secret (shared
    by the cluster's services, readable only by its owner). No key, no controller."""
    if config.controller_key_file:
        return read_key_file(config.controller_key_file)
    if config.auth_dir:
        secret = AuthDir(config.auth_dir).server.secret_key.encode()
        return hmac.new(secret, b"quiver controller raft", hashlib.sha256).hexdigest()
    raise ValueError("--controller needs a Raft key: --controller-key-file FILE (make one: quiver auth "
                     "controller-key FILE) or --auth-dir")
