"""The gateway's settings: with auth on, anonymous Kafka clients never get the admin key."""

import pytest

from quiver_kafka.config import Config


def test_auth_on_without_sasl_or_a_chosen_key_refuses_to_start(tmp_path):
    with pytest.raises(ValueError, match="--sasl-users, or --credentials"):
        Config(auth_dir=str(tmp_path))


def test_auth_on_with_sasl_users_or_an_explicit_key_is_accepted(tmp_path):
    assert Config(auth_dir=str(tmp_path), sasl_users=str(tmp_path / "users.json")).sasl_users
    key = str(tmp_path / "clients.key")
    assert Config(auth_dir=str(tmp_path), credentials=key).key_file == key


def test_auth_off_needs_neither():
    assert Config().key_file is None
