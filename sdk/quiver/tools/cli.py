"""The `quiver` command: the root group, its global options and `main()`.

Every verb lives in a cli_*.py module by subject (local cluster, topics, messages,
consumer groups, brokers and cluster, auth) and is registered here; cli_common.py holds
the context, `-o table|json` and the exit codes (0 ok, 1 nothing found / check failed,
2 usage, 3 server or connection error). A QuiverError that leaves a verb is mapped to
its exit code here, once, with its message on stderr. With neither --namesrv nor QUIVER_NAMESRV,
the name servers are those `quiver up` wrote to its state file (--data-dir, env QUIVER_DATA_DIR),
else 127.0.0.1:9876.
"""

import logging
import sys

import click

from quiver import __version__
from quiver.tools import cli_auth, cli_backup, cli_cluster, cli_consumer, cli_local, cli_msg, cli_topic
from quiver.tools.cli_common import FORMATS, Ctx, exit_code_for

STATE_FILE = cli_local.STATE_FILE
DEFAULT_NAMESRV = "127.0.0.1:9876"


class QuiverGroup(click.Group):
    """The root group: maps a QuiverError raised by any verb onto exit code 1 or 3."""

    def invoke(self, ctx):
        from quiver.errors import QuiverError
        try:
            return super().invoke(ctx)
        except QuiverError as exc:
            click.echo(f"error: {exc}", err=True)
            raise click.exceptions.Exit(exit_code_for(exc)) from None


@click.group(cls=QuiverGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", "-V", prog_name="quiver", message="%(prog)s %(version)s")
@click.option("--namesrv", envvar="QUIVER_NAMESRV", default=None,
              help="name servers 'h:p;h:p' (env QUIVER_NAMESRV; default: the cluster `quiver up` started in "
                   "./data, else 127.0.0.1:9876)")
@click.option("--credentials", envvar="QUIVER_CREDENTIALS", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="auth on: a user's key file (env QUIVER_CREDENTIALS)")
@click.option("-o", "--output", type=click.Choice(FORMATS), default=None,
              help="default output of every verb: table or json")
@click.pass_context
def cli(ctx, namesrv, credentials, output):
    """Quiver message system: run a local cluster and administer a running one.

    \b
    Exit codes: 0 ok; 1 nothing found, a check failed or a prompt declined; 2 usage or input
    found invalid before any call (names, bodies, ids, files, choices); 3 server or connection
    error. Every verb that prints data takes -o table|json.

    \b
    Examples:
      quiver up --demo
      quiver topic create Orders --queues 8
      quiver msg send --topic Orders --body hello --props region=eu
      quiver consumer progress order-workers -o json
      quiver --namesrv "10.0.0.1:9876;10.0.0.2:9876" cluster
    """
    obj = ctx.ensure_object(Ctx)
    if obj.connect is None:   # a test's stub cluster brings its own address
        obj.namesrv = namesrv or cli_local.state_namesrv() or DEFAULT_NAMESRV
    obj.credentials = credentials or obj.credentials
    obj.output = output or obj.output


for module in (cli_local, cli_topic, cli_msg, cli_consumer, cli_cluster, cli_backup, cli_auth):
    module.register(cli)


def main(argv=None) -> int:
    """Run `quiver` with `argv` (default sys.argv[1:]); returns the exit code."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        rv = cli.main(args=argv, prog_name="quiver", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:   # usage errors: exit 2 with click's message
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        return 130
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
