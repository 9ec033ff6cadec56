"""The `quiver` CLI's shared contract: exit codes, usage errors, help with examples, -o json,
plain output when piped. Verbs run in-process against a stub cluster (quiver.testing)."""

import json

import click
import pytest
from click.testing import CliRunner

from quiver.errors import (ClientError, MessageIllegalError, QueryNotFoundError, RequestTimeoutError,
                           ServiceNotAvailableError, SubscriptionGroupNotExistError, TopicNotExistError, error_for)
from quiver.testing import stub_cluster
from quiver.wire.codes import ResponseCode
from quiver.tools.cli import cli as root
from quiver.tools.cli import main
from quiver.tools.cli_common import exit_code_for, parse_when
from support.cli_runner import StubCli


@pytest.fixture(scope="module")
def qcli():
    with stub_cluster() as c:
        yield StubCli(c)


def _verbs(group: click.Group, path=()):
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            yield from _verbs(cmd, path + (name,))
        else:
            yield path + (name,), cmd


def test_every_verb_has_help_with_examples():
    runner = CliRunner()
    verbs = list(_verbs(root))
    assert len(verbs) >= 40
    for path, _ in verbs:
        res = runner.invoke(root, [*path, "--help"])
        assert res.exit_code == 0, path
        assert "Examples:" in res.stdout and f"quiver {' '.join(path)}" in res.stdout, path


def test_every_verb_that_prints_data_takes_output_json():
    quiet = {("down",), ("up",), ("ping",), ("ingest",), ("topic", "delete"), ("consumer", "delete"),
             ("filter", "check"), ("auth", "init"), ("auth", "controller-key"), ("acl", "grant"), ("acl", "revoke"), ("acl", "user", "add"),
             ("acl", "user", "delete")}   # they print what they did, no data to parse
    for path, cmd in _verbs(root):
        names = {o for p in cmd.params for o in getattr(p, "opts", [])}
        assert ("-o" in names) != (path in quiet), path


@pytest.mark.parametrize("argv", [["topic", "create"], ["nosuchverb"], ["topic", "list", "-o", "yaml"],
                                  ["msg", "send", "--topic", "T"], ["consumer", "reset", "g", "--topic", "T"],
                                  ["consumer", "reset", "g", "--topic", "T", "--to", "earliest", "--offset", "1"],
                                  ["msg", "send", "--topic", "T", "--body", "x", "--props", "novalue"],
                                  ["consumer", "reset", "g", "--topic", "T", "--to", "yesterday-ish"],
                                  ["consumer", "reset", "g", "--topic", "T", "--to", "1200"],
                                  ["topic", "create", "bad topic!"], ["consumer", "progress", "bad group!"],
                                  ["msg", "view", "--id", "garbage"], ["msg", "send", "--topic", "T", "--body", ""],
                                  ["acl", "grant", "u", "--resource", "topic:T", "--actions", "FLY"],
                                  ["--credentials", "/nonexistent.key", "topic", "list"],
                                  ["topic", "route", "bad topic!"], ["topic", "delete", "bad topic!"],
                                  ["topic", "purge", "bad topic!", "--yes"], ["topic", "shrink", "T"],
                                  ["msg", "query", "--topic", "bad topic!", "--key", "k"],
                                  ["msg", "trace", "--id", "garbage"], ["msg", "cancel", "--id", "12", "--topic", "T"],
                                  ["msg", "tail", "--topic", "bad topic!"],
                                  ["consumer", "dlq", "bad group!"], ["consumer", "resend", "g", "--id", "nothex"],
                                  ["consumer", "delete", "bad group!"], ["consumer", "config", "bad group!"],
                                  ["stats", "--topic", "bad topic!"], ["stats", "--group", "bad group!"],
                                  ["acl", "revoke", "u", "--resource", "topic:T", "--actions", "FLY"]])
def test_usage_errors_exit_2(argv, capsys):
    assert main(argv) == 2
    assert capsys.readouterr().err.strip()   # click says what was wrong


def test_usage_errors_exit_2_under_clirunner(qcli):
    assert qcli("topic", "create").exit_code == 2
    assert qcli("msg", "get", "--topic", "T", "--broker", "b", "--queue", "-1", "--offset", "0").exit_code == 2


def test_exit_codes_of_quiver_errors():
    assert exit_code_for(QueryNotFoundError("x")) == 1
    assert exit_code_for(TopicNotExistError("x")) == 1
    assert exit_code_for(SubscriptionGroupNotExistError("x")) == 1
    assert exit_code_for(ServiceNotAvailableError("x")) == 3
    assert exit_code_for(RequestTimeoutError("x")) == 3
    assert exit_code_for(ClientError("x")) == 3
    assert exit_code_for(MessageIllegalError("bad name")) == 2                     # refused before sending
    assert exit_code_for(error_for(ResponseCode.MESSAGE_ILLEGAL, "bad name")) == 3  # the server's answer


def test_no_name_server_is_exit_3(capsys):
    assert main(["--namesrv", "127.0.0.1:1", "topic", "list"]) == 3
    assert capsys.readouterr().err.startswith("error: ")


def test_a_missing_topic_is_exit_1_with_the_reason(qcli):
    res = qcli("topic", "status", "NoSuchTopic")
    assert res.exit_code == 1 and "error:" in res.stderr and res.stdout == ""


def test_json_is_one_document_with_sorted_keys(qcli):
    qcli.json("topic", "create", "Shape", "--queues", "2")
    res = qcli("topic", "status", "Shape", "-o", "json")
    doc = json.loads(res.stdout)
    assert list(doc) == sorted(doc) == ["messages", "queues", "topic"]
    assert [sorted(q) for q in doc["queues"]] == [["broker", "compacted_to", "last_store_time", "local_min_offset",
                                                  "max_offset", "min_offset", "queue_id"]] * 2
    root_json = qcli("-o", "json", "topic", "list")          # the root's -o is every verb's default
    assert "Shape" in json.loads(root_json.stdout)["topics"]


def test_piped_tables_are_plain_and_uncut(qcli):
    long_topic = "T" * 120
    qcli("topic", "create", long_topic, "--queues", "1")
    res = qcli("topic", "list", env={"NO_COLOR": "1"})
    assert any(line.strip() == long_topic for line in res.stdout.splitlines())   # not folded at 80 columns
    assert "\x1b[" not in res.stdout


def test_parse_when_reads_iso_and_epoch_seconds_or_ms():
    assert parse_when("1700000000000") == 1700000000000
    assert parse_when("1700000000") == 1700000000000
    assert parse_when("2023-11-14T22:13:20+00:00") == 1700000000000
    for bad in ("next tuesday", "1200", "17000000000"):   # other digit counts are never guessed
        with pytest.raises(click.BadParameter):
            parse_when(bad)


def test_version_matches_the_package_metadata():
    import pathlib
    import tomllib
    import quiver
    pyproject = pathlib.Path(__file__).resolve().parents[3] / "pyproject.toml"
    assert quiver.__version__ == tomllib.loads(pyproject.read_text())["project"]["version"]
    assert main(["--version"]) == 0


def test_trace_without_a_trace_exits_1(qcli):
    res = qcli("msg", "trace", "--id", "0" * 32)
    assert res.exit_code in (1, 3), res.output   # 3 only in a build without tracing
    assert ("no trace" in res.stderr) or ("tracing not available" in res.stderr)


def test_cli_guide_lists_every_verb():
    import pathlib
    section = (pathlib.Path(__file__).resolve().parents[3] / "docs" / "cli.md").read_text()
    for path, _ in _verbs(root):
        assert f"quiver {' '.join(path)}" in section or f"{' '.join(path)}" in section, path
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "-o json", "resetOffsetByTime", "statsAll"):
        assert code in section
