"""What every `quiver` verb shares: the context (name servers, credentials, how clients are made),
output (`-o table|json`), exit codes and the mapping of QuiverError classes onto them.

Exit codes: 0 ok, 1 nothing found, a check failed or a prompt declined, 2 usage or input found
invalid before any call (names, bodies, ids, files, choices), 3 a server or connection error. Tables are rich tables: coloured only on a terminal (and never with NO_COLOR,
which rich honours); piped, they are plain text at full width so scripts can grep whole ids.
`-o json` prints one JSON document with stable keys (sorted), never a table.

Does not own any verb (cli_*.py) nor the wire (the SDK's clients do the calls).
"""

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

import click

from quiver.client.access import broker_access

EXIT_OK, EXIT_NOT_FOUND, EXIT_USAGE, EXIT_SERVER = 0, 1, 2, 3
PIPE_WIDTH = 10_000   # piped output is never wrapped or cut: a script greps whole ids
FORMATS = ("table", "json")


def exit_code_for(exc: Exception) -> int:
    """1 for "nothing there" answers, 2 for input the SDK refused before sending it (a bad name,
    body, property or field), 3 for every other server or connection error."""
    from quiver.errors import (FieldError, InvalidParameterError, MessageIllegalError, NoPermissionError,
                               PropertiesSizeExceededError, QueryNotFoundError, SubscriptionGroupNotExistError,
                               SubscriptionNotExistError, TopicNotExistError)
    if isinstance(exc, (QueryNotFoundError, TopicNotExistError, SubscriptionGroupNotExistError,
                        SubscriptionNotExistError)):
        return EXIT_NOT_FOUND
    if not getattr(exc, "from_server", True) and isinstance(exc, (
            FieldError, InvalidParameterError, MessageIllegalError, NoPermissionError, PropertiesSizeExceededError)):
        return EXIT_USAGE
    return EXIT_SERVER


@dataclass
class Ctx:
    """The root options, handed to every verb as click's `ctx.obj`.

    `connect(cls, *args, **kw)` makes an SDK client; tests pass a stub cluster's `client`
    (quiver.testing) so the verbs run against in-process services."""
    namesrv: str = "127.0.0.1:9876"
    credentials: str | None = None
    output: str | None = None
    connect: Callable | None = None
    transport_factory: Callable | None = None
    extra: dict = field(default_factory=dict)

    def client(self, cls, *args, **kw):
        kw.setdefault("credentials", self.credentials)
        if self.connect is not None:
            return self.connect(cls, *args, **kw)
        return cls(*args, namesrv=self.namesrv, **kw)

    @contextlib.contextmanager
    def admin(self):
        from quiver.client.admin import Admin
        a = self.client(Admin)
        try:
            yield a
        finally:
            a.shutdown()

    @contextlib.contextmanager
    def producer(self, group: str = "CLI_PRODUCER"):
        from quiver.client.producer import Producer
        with self.client(Producer, group) as p:
            yield p

    def transport(self, name: str):
        if self.transport_factory is not None:
            return self.transport_factory(name)
        from quiver.wire.transport import Transport
        return Transport(name, credentials=self.credentials)

    def fmt(self, given: str | None) -> str:
        return given or self.output or "table"


def output_option(f):
    """`-o table|json` on a verb that prints data."""
    return click.option("-o", "--output", "output", type=click.Choice(FORMATS), default=None,
                        help="table (default; colour on a terminal) or json (one document, stable keys)")(f)


def confirm(question: str) -> None:
    """Ask; a "no" (or no answer) ends the verb with exit 1, having changed nothing."""
    try:
        yes = click.confirm(question, default=False)
    except click.Abort:   # no terminal to answer from, or Ctrl-C at the prompt
        yes = False
    if not yes:
        finish(EXIT_NOT_FOUND, "declined: nothing changed")


class NameType(click.ParamType):
    """A topic or group name checked by the wire's own rules before any call (exit 2)."""

    def __init__(self, kind: str):
        self.name = kind

    def convert(self, value, param, ctx):
        from quiver.wire.names import group_problem, topic_problem
        problem = (topic_problem if self.name == "topic" else group_problem)(value)
        if problem is not None:
            self.fail(problem, param, ctx)
        return value


TOPIC, GROUP = NameType("topic"), NameType("group")


class MsgIdType(click.ParamType):
    """A msgId (unique or offset): 32 hex characters, checked before any call (exit 2)."""
    name = "msgid"

    def convert(self, value, param, ctx):
        try:
            bytes.fromhex(value)
        except ValueError:
            self.fail(f"{value!r} is not a msgId: 32 hex characters, as send() returned it", param, ctx)
        if len(value) != 32:
            self.fail(f"{value!r} is not a msgId: 32 hex characters (got {len(value)})", param, ctx)
        return value.upper()


MSG_ID = MsgIdType()


def check_brokers(admin, names) -> None:
    """Broker names the name servers do not know are a typo, not an outage: exit 2."""
    known = broker_access(admin).all_broker_addrs()
    unknown = sorted(set(n for n in names if n) - set(known))
    if unknown:
        finish(EXIT_USAGE, f"error: unknown broker {', '.join(unknown)} (known: {', '.join(sorted(known)) or 'none'})")


def finish(code: int, message: str | None = None):
    """End the verb with an exit code (and a line on stderr)."""
    if message:
        click.echo(message, err=True)
    raise click.exceptions.Exit(code)


# ---- printing -------------------------------------------------------------------------------

def console(stderr: bool = False):
    from rich.console import Console
    c = Console(stderr=stderr, highlight=False)
    if not c.is_terminal:
        c = Console(stderr=stderr, highlight=False, width=PIPE_WIDTH, no_color=True)
    return c


def print_json(doc) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=True, default=str))


def say(text: str = "", err: bool = False) -> None:
    """A plain line (no markup: peer strings may hold brackets)."""
    click.echo(text, err=err)


def cell(value) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str, sort_keys=True)
    return str(value)


def print_table(rows: list[dict], columns: list, title: str | None = None, align: bool = True) -> None:
    """`columns`: keys, or (key, header) pairs; numbers right-aligned (`align`); long cells fold,
    never cut. The title is a line of its own (a table-wide title would wrap)."""
    from rich import box
    from rich.table import Table
    cols = [(c, c) if isinstance(c, str) else c for c in columns]
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for key, header in cols:
        numeric = align and any(isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)
                                for r in rows)
        t.add_column(header, justify="right" if numeric else "left", overflow="fold")
    for r in rows:
        t.add_row(*(cell(r.get(key)) for key, _ in cols))
    if title:
        say(title)
    console().print(t)


def print_record(doc: dict, title: str | None = None) -> None:
    """One object as a two-column field/value table."""
    print_table([{"field": k, "value": v} for k, v in doc.items()], ["field", "value"], title, align=False)


def show(ctx_obj: Ctx, output: str | None, doc, rows: list[dict] | None = None, columns: list | None = None,
         title: str | None = None) -> None:
    """`doc` as JSON, or `rows` (default: doc itself) as a table of `columns` (default: a record)."""
    if ctx_obj.fmt(output) == "json":
        print_json(doc)
    elif columns is None:
        print_record(doc, title)
    else:
        print_table(doc if rows is None else rows, columns, title)


# ---- values ----------------------------------------------------------------------------------

def ms_text(ts) -> str | None:
    """Epoch ms as UTC with its offset written, 'YYYY-mm-dd HH:MM:SS.mmm+00:00', as the console
    shows times (None stays None)."""
    if not ts:
        return None
    return datetime.fromtimestamp(ts / 1000, timezone.utc).isoformat(" ", "milliseconds")


WHEN_HINT = "an ISO datetime, UTC unless it has an offset (2024-05-01T12:00:00[+02:00]), or epoch seconds (10 digits) or ms (13 digits)"


def parse_when(text: str) -> int:
    """An ISO-8601 datetime (UTC unless it has an offset), or epoch seconds (10 digits)
    or ms (13 digits) -> epoch ms. Other digit strings are refused: never guessed."""
    if text.isdigit():
        if len(text) == 13:
            return int(text)
        if len(text) == 10:
            return int(text) * 1000
        raise click.BadParameter(f"{text!r}: use {WHEN_HINT}")
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r}: use {WHEN_HINT}")
    if dt.tzinfo is None:   # one time zone everywhere: the console's and what ms_text prints
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def parse_props(items) -> dict[str, str]:
    out = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r}: use KEY=VALUE", param_hint="--props")
        out[key] = value
    return out
