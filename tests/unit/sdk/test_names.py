"""quiver.wire.names: the rules for names that become paths or addresses, and confine()."""

import os

import pytest

from quiver.wire import names, validation
from quiver.errors import InvalidParameterError, MessageIllegalError, NoPermissionError, QuiverError

GOOD_TOPICS = ["T", "Orders", "a-b_c|d%e", "0", "x" * 127, "%RETRY%" + "g" * 120, "%DLQ%" + "g" * 250,
               "SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer", "RMQ_SYS_TRANS_HALF_TOPIC"]

TRAVERSAL = ["..", ".", "../x", "../../../etc", "a/b", "/etc", "a\\b", "..\\x", "a/../b", "./a", "a/.", "~root"]
CONTROL = ["a\x00b", "\x00", "abc\n", "a\rb", "a\tb", "a b", " a", "a\x7f", "a\x1b[31m"]
UNICODE = [
    "Ordérs",                 # Latin-1 letter
    "Оrders",                 # Cyrillic capital O: a lookalike of 'O'
    "ＯＲＤＥＲＳ",             # fullwidth
    "Orders\u202e",           # right-to-left override
    "a\u200bb",               # zero-width space
    "a\u2044b",               # fraction slash, a lookalike of '/'
    "\u2024\u2024",           # one-dot leaders, a lookalike of '..'
    "٣",                      # Arabic-Indic digit three (isdigit() is True)
    "topic\ufeff",            # BOM
    "ß", "😀",
]
NOT_STR = [None, 5, 1.5, b"T", ["T"], {"t": 1}, True]


@pytest.mark.parametrize("name", GOOD_TOPICS)
def test_good_topics(name):
    names.check_topic(name)
    assert names.is_valid_topic(name) and names.topic_problem(name) is None


@pytest.mark.parametrize("name", TRAVERSAL + CONTROL + UNICODE)
def test_bad_characters_are_named_in_the_remark(name):
    with pytest.raises(MessageIllegalError) as exc:
        names.check_topic(name)
    remark = exc.value.remark
    assert "illegal characters" in remark and "only ASCII letters, digits" in remark
    assert remark.isascii() and remark.isprintable()  # no raw NUL, newline or RTL mark reaches a log
    assert not names.is_valid_topic(name) and not names.is_valid_group(name)
    with pytest.raises(MessageIllegalError):
        names.check_group(name)


def test_remarks_say_what_is_wrong():
    assert "NUL at position 1" in names.topic_problem("a\x00b")
    assert "path separator '/'" in names.topic_problem("a/b")
    assert "U+FF2F" in names.topic_problem("ＯＲＤＥＲＳ")
    assert "U+202E" in names.topic_problem("Orders\u202e")
    assert "control character U+000A" in names.topic_problem("abc\n")
    assert names.topic_problem("x" * 10_000).endswith("limit is 127")  # not echoed in full
    assert len(names.topic_problem("/" * 10_000)) < 300


@pytest.mark.parametrize("name", ["", " ", "\t", "\u3000"])
def test_blank(name):
    assert "blank" in names.topic_problem(name)
    with pytest.raises(MessageIllegalError, match="blank"):
        names.check_group(name)


@pytest.mark.parametrize("value", NOT_STR)
def test_not_a_string(value):
    assert "must be a string" in names.topic_problem(value)
    for check in (names.check_topic, names.check_group):
        with pytest.raises(MessageIllegalError):
            check(value)
    for check in (names.check_broker_name, names.check_cluster, names.check_addr):
        with pytest.raises(InvalidParameterError):
            check(value)
    assert not any(f(value) for f in (names.is_valid_topic, names.is_valid_group, names.is_valid_broker_name,
                                       names.is_valid_cluster, names.is_valid_addr))


def test_lengths():
    assert names.is_valid_topic("x" * 127) and not names.is_valid_topic("x" * 128)
    assert "limit is 127" in names.topic_problem("x" * 128)
    assert names.is_valid_topic("%RETRY%" + "g" * 248) and not names.is_valid_topic("%RETRY%" + "g" * 249)
    assert names.is_valid_topic("%DLQ%" + "g" * 250) and "limit is 255" in names.topic_problem("%DLQ%" + "g" * 251)
    assert names.is_valid_group("g" * 120) and "limit is 120" in names.group_problem("g" * 121)
    assert names.is_valid_broker_name("b" * 127) and not names.is_valid_broker_name("b" * 128)


def test_reserved_and_system_topics():
    for topic in names.NOT_ALLOWED_SEND:
        names.check_topic(topic)                      # a valid name ...
        with pytest.raises(NoPermissionError, match="system topic"):
            names.check_topic(topic, for_send=True)   # ... apps cannot send to
    for topic in names.SYSTEM_TOPICS | {"rmq_sys_anything"}:
        with pytest.raises(NoPermissionError, match="reserved"):
            names.check_topic(topic, for_create=True)
    names.check_topic("%RETRY%g", for_send=True)      # consumers send back there
    names.check_topic("TBW102", for_send=True)
    with pytest.raises(MessageIllegalError):          # the name rule comes first
        names.check_topic("../x", for_send=True, for_create=True)


def test_validation_keeps_its_public_names():
    assert validation.check_topic is names.check_topic and validation.check_group is names.check_group
    assert validation.SCHEDULE_TOPIC == "SCHEDULE_TOPIC_XXXX" and validation.is_system_topic("rmq_sys_x")
    assert validation.TOPIC_MAX_CHARS == 127 and validation.GROUP_MAX_CHARS == 120
    assert validation.TOPIC_RE.match("T") and not validation.TOPIC_RE.match("T\n")  # "$" let this through
    with pytest.raises(MessageIllegalError, match="illegal characters"):
        validation.check_topic("bad topic!")
    with pytest.raises(NoPermissionError):
        validation.check_topic("SCHEDULE_TOPIC_XXXX", True)  # positional, as before


def test_broker_names_and_clusters():
    for name in ["broker-a", "broker-vm.example.com", "DefaultCluster", "b_1", ".hidden", "a..b", "%x|y"]:
        names.check_broker_name(name)
        names.check_cluster(name)
    for name in [".", "..", "a/b", "a\\b", "../b", "a\x00", "brøker", "a b", "", "b" * 128]:
        with pytest.raises(InvalidParameterError):
            names.check_broker_name(name)
        assert not names.is_valid_cluster(name)
    assert "names a directory" in names.broker_name_problem("..")
    assert "cluster name" in names.broker_name_problem("a/b", "cluster name")


@pytest.mark.parametrize("addr,expected", [
    ("127.0.0.1:9876", ("127.0.0.1", 9876)), ("localhost:1", ("localhost", 1)),
    ("broker-a.example.com.:65535", ("broker-a.example.com.", 65535)), ("quiver_broker_1:10911", ("quiver_broker_1", 10911)),
    ("[::1]:10911", ("::1", 10911)), ("[2001:db8::7]:80", ("2001:db8::7", 80)), ("0.0.0.0:80", ("0.0.0.0", 80)),
    ("1e100.net:443", ("1e100.net", 443)),
])
def test_good_addresses(addr, expected):
    assert names.check_addr(addr) == expected and names.is_valid_addr(addr)


@pytest.mark.parametrize("addr,fragment", [
    ("", "no port"), ("host", "no port"), (":80", "host is empty"), ("host:", "port must be"),
    ("host:0", "port must be"), ("host:65536", "port must be"), ("host:-1", "port must be"), ("host:+80", "port must be"),
    ("host: 80", "port must be"), ("host:80 ", "port must be"), ("host:0x50", "port must be"), ("host:٨٠", "non-ASCII"),
    ("host:123456", "port must be"), ("::1:80", "in brackets"), ("[::1]80", "not '[IPv6]:port'"), ("[::1:80", "not '[IPv6]"),
    ("[zz::1]:80", "not an IPv6"), ("[fe80::1%eth0]:80", "zone ids"), ("256.0.0.1:80", "not an IPv4"),
    ("1.2.3:80", "not an IPv4"), ("01.2.3.4:80", "not an IPv4"), ("-host:80", "not a hostname"),
    ("host-:80", "not a hostname"), ("a..b:80", "not a hostname"), ("a/b:80", "not a hostname"),
    ("../../x:80", "not a hostname"), ("*:80", "not a hostname"), ("ghost", "no port"), ("h\x00:80", "control"),
    ("h\n:80", "control"), ("exämple.com:80", "non-ASCII"), ("a" * 64 + ".com:80", "not a hostname"),
    ("a." * 127 + "a:80", "limit is 253"), ("tcp://h:80", "no scheme"), ("h:80:90", "one ':' only"),
])
def test_bad_addresses(addr, fragment):
    assert not names.is_valid_addr(addr)
    with pytest.raises(InvalidParameterError) as exc:
        names.check_addr(addr)
    assert fragment in exc.value.remark, exc.value.remark
    assert exc.value.remark.isascii() and exc.value.remark.isprintable()


def test_confine_keeps_paths_under_the_base(tmp_path):
    base = tmp_path / "data"
    base.mkdir()
    (tmp_path / "outside").mkdir()
    real = os.path.realpath(base)
    assert names.confine(str(base)) == real
    assert names.confine(str(base), "T", "0") == os.path.join(real, "T", "0")
    assert names.confine(str(base), "a/b") == os.path.join(real, "a", "b")
    assert names.confine(str(base) + "/", "x/../y") == os.path.join(real, "y")
    for parts in [("..",), (".",), ("a", "..", ".."), ("../outside",), ("/etc",), (str(tmp_path / "outside"),),
                  ("T", "../../outside"), ("a", "")]:
        with pytest.raises(names.UnsafePathError):
            names.confine(str(base), *parts)
    for part in ["", "a\x00b", None, 5, b"T"]:
        with pytest.raises(names.UnsafePathError, match="non-empty string without NUL"):
            names.confine(str(base), part)
    # a sibling whose name starts like the base is not under it
    (tmp_path / "data2").mkdir()
    with pytest.raises(names.UnsafePathError):
        names.confine(str(base), "../data2/x")


def test_confine_follows_symlinks(tmp_path):
    base = tmp_path / "data"
    base.mkdir()
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", base / "link")
    os.symlink(base / "T0", base / "inner")  # a link that stays inside is fine
    with pytest.raises(names.UnsafePathError, match="leaves its base directory"):
        names.confine(str(base), "link")
    with pytest.raises(names.UnsafePathError):
        names.confine(str(base), "link", "0")
    assert names.confine(str(base), "inner") == os.path.join(os.path.realpath(base), "T0")
    # a base that is itself a symlink is resolved first
    os.symlink(base, tmp_path / "alias")
    assert names.confine(str(tmp_path / "alias"), "T") == os.path.join(os.path.realpath(base), "T")


def test_errors_are_quiver_errors_with_codes():
    for check, bad in [(names.check_topic, "a/b"), (names.check_group, "a/b"), (names.check_broker_name, ".."),
                       (names.check_cluster, "a/b"), (names.check_addr, "x")]:
        with pytest.raises(QuiverError) as exc:
            check(bad)
        assert exc.value.remark and int(exc.value.code) > 0
    assert issubclass(names.UnsafePathError, InvalidParameterError)
