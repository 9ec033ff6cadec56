"""The gateways' secret files (Kafka SASL users, proxy access keys): one loader, checked at start."""

import json
import os

import pytest

from quiver.wire.curve import Credentials, KeyPair, load_secret_map, write_credentials


@pytest.fixture
def key_file(tmp_path):
    kp, server = KeyPair.generate(), KeyPair.generate()
    path = tmp_path / "bob.key"
    write_credentials(str(path), Credentials("bob", kp.public_key, kp.secret_key, server.public_key))
    return str(path)


def write(path, data, mode=0o600):
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    os.chmod(path, mode)
    return str(path)


def test_a_good_file_maps_names_to_secrets_and_credentials(tmp_path, key_file):
    path = write(tmp_path / "users.json", {"bob": {"password": "pw", "credentials": key_file}})
    users = load_secret_map(path, "--sasl-users", "password", 10)
    assert users["bob"][0] == "pw" and users["bob"][1].user == "bob"


@pytest.mark.parametrize("data,match", [
    ("not json", "--sasl-users"),
    ([], "1..2 entries"),
    ({}, "1..2 entries"),
    ({"a": {"password": "x", "credentials": "k"}, "b": {}, "c": {}}, "1..2 entries"),
    ({"bob": {"password": ""}}, "'bob' is not"),
    ({"bob": {"password": 1, "credentials": "k"}}, "'bob' is not"),
    ({"bob": "pw"}, "'bob' is not"),
])
def test_bad_files_are_refused_saying_what_to_fix(tmp_path, data, match):
    path = write(tmp_path / "users.json", data)
    with pytest.raises(ValueError, match=match):
        load_secret_map(path, "--sasl-users", "password", 2)


def test_a_file_others_may_read_is_refused(tmp_path, key_file):
    path = write(tmp_path / "users.json", {"bob": {"password": "pw", "credentials": key_file}}, mode=0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        load_secret_map(path, "--sasl-users", "password", 10)


def test_a_name_the_caller_refuses_is_named(tmp_path, key_file):
    path = write(tmp_path / "keys.json", {"A K": {"secret": "s", "credentials": key_file}})
    with pytest.raises(ValueError, match="without spaces or commas"):
        load_secret_map(path, "--access-keys", "secret", 10, name_ok=lambda n: " " not in n)
