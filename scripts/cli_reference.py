"""Write the CLI reference (docs/reference/cli.md) from the click commands of `quiver`.

    .venv/bin/python scripts/cli_reference.py            # print
    .venv/bin/python scripts/cli_reference.py --write    # update docs/reference/cli.md
A unit test checks the page equals this output, so a new verb or option cannot be left out.
"""

import pathlib
import sys

import click

from quiver.tools.cli import cli

PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "reference" / "cli.md"
HEADER = """# CLI reference

Every verb of `quiver`, its arguments and options, generated from the click commands by
`scripts/cli_reference.py` (a test keeps this page current; do not edit it by hand). The
[CLI guide](../cli.md) says what the verbs are for, the exit codes and how they map to mqadmin.
"""


def verbs(group: click.Group, path=()):
    """(path, command) of every command below `group`, groups included, in name order."""
    for name in sorted(group.commands):
        cmd = group.commands[name]
        yield path + (name,), cmd
        if isinstance(cmd, click.Group):
            yield from verbs(cmd, path + (name,))


def cell(text) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def describe_type(param: click.Parameter) -> str:
    if isinstance(param, click.Option) and param.is_flag and not param.secondary_opts:
        return "flag"
    kind = param.type
    if isinstance(kind, click.Choice):
        return " \\| ".join(f"`{c}`" for c in kind.choices)
    text = kind.name.lower()
    if isinstance(kind, (click.IntRange, click.FloatRange)) and (kind.min is not None or kind.max is not None):
        lo, hi = ("<" if kind.min_open else "<="), ("<" if kind.max_open else "<=")
        if kind.min is None:
            text += f" x{hi}{kind.max}"
        elif kind.max is None:
            text += f" x{lo.replace('<', '>')}{kind.min}"
        else:
            text += f" {kind.min}{lo}x{hi}{kind.max}"
    if param.multiple:
        text += ", repeatable"
    return cell(text)


def describe_default(param: click.Option) -> str:
    default = param.default
    if getattr(default, "name", None) == "UNSET":   # click's "no default given" sentinel
        return ""
    if callable(default) or default is None or default == () or (param.is_flag and default is False):
        return ""
    if isinstance(default, (list, tuple)):
        default = ", ".join(map(str, default))
    return f"`{cell(default)}`" if str(default) != "" else ""


def help_text(text: str) -> list[str]:
    """A click docstring as Markdown: plain paragraphs as they are, `\\b` blocks (examples,
    tables) verbatim in a text fence."""
    out = []
    for para in text.split("\f")[0].split("\n\n"):
        lines = para.strip("\n").splitlines()
        if lines and lines[0].strip() == "\b":
            body = lines[1:]
            while body and not body[-1].strip():
                body.pop()
            indent = min((len(ln) - len(ln.lstrip()) for ln in body if ln.strip()), default=0)
            out += ["```text", *[ln[indent:].rstrip() for ln in body], "```", ""]
        else:
            out += [" ".join(ln.strip() for ln in lines), ""]
    return out


def section(path: tuple, cmd: click.Command, parents: list[click.Context]) -> list[str]:
    ctx = click.Context(cmd, info_name=path[-1] if path else "quiver", parent=parents[-1] if parents else None)
    title = "quiver " + " ".join(path) if path else "quiver"
    usage = " ".join([ctx.command_path, *cmd.collect_usage_pieces(ctx)])
    out = [f"{'#' * max(2, min(len(path) + 1, 4))} `{title}`", "", "```text", f"Usage: {usage}", "```", ""]
    out += help_text(cmd.help or "")
    opts = [p for p in cmd.params if isinstance(p, click.Option) and not p.hidden]
    if opts:
        out += ["| option | takes | default | what |", "|---|---|---|---|"]
        for p in opts:
            names = ", ".join(f"`{n}`" for n in p.opts + p.secondary_opts)
            env = f" (env `{p.envvar}`)" if isinstance(p.envvar, str) and p.envvar not in (p.help or "") else ""
            out.append(f"| {names} | {describe_type(p)} | {describe_default(p)} | {cell(p.help or '')}{env} |")
        out.append("")
    return out


def reference() -> str:
    out = [HEADER]
    stack: dict[tuple, click.Context] = {}
    root_ctx = click.Context(cli, info_name="quiver")
    stack[()] = root_ctx
    out += section((), cli, [])
    for path, cmd in verbs(cli):
        parent = stack[path[:-1]]
        if isinstance(cmd, click.Group):
            stack[path] = click.Context(cmd, info_name=path[-1], parent=parent)
        out += section(path, cmd, [parent])
    return "\n".join(out).rstrip("\n") + "\n"


def main() -> None:
    text = reference()
    if "--write" in sys.argv:
        PAGE.write_text(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
