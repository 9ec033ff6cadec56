"""python -m quiver_broker.migrations: the metadata schema by hand (a DBA, before rolling brokers out).

    python -m quiver_broker.migrations current  --metadata-url URL
    python -m quiver_broker.migrations history
    python -m quiver_broker.migrations upgrade  --metadata-url URL --broker-name NAME [--to REV]

`upgrade` does what a broker does at start (runner.upgrade: same lock, same stamping of
an older Quiver's tables); `--broker-name` names the broker whose rows the database held
before revision 0002 (needed only when it holds rows). The URL defaults to
QUIVER_METADATA_URL. No alembic.ini is needed; with one of your own whose script_location
is this directory, plain `alembic` commands work too (`-x broker=NAME`).
"""

import argparse
import logging
import os
import sys

from alembic import command
from sqlalchemy import create_engine

from . import runner


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quiver_broker.migrations", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("current", "history", "upgrade"))
    parser.add_argument("--metadata-url", default=os.environ.get("QUIVER_METADATA_URL", ""),
                        help="SQLAlchemy URL (env QUIVER_METADATA_URL)")
    parser.add_argument("--broker-name", default=None, help="owner of rows stored before revision 0002")
    parser.add_argument("--to", default="head", help="target revision of `upgrade` (default: head)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    if args.command == "history":
        command.history(runner.alembic_config())
        return 0
    if not args.metadata_url:
        parser.error("--metadata-url (or QUIVER_METADATA_URL) is required")
    engine = create_engine(args.metadata_url)
    try:
        if args.command == "upgrade":
            before, after = runner.upgrade(engine, args.broker_name, args.to)
            print(f"{before or '(empty)'} -> {after}" if before != after else f"at {after} already")
        else:
            with engine.connect() as conn:
                print(runner.current_revision(conn) or "(empty)", f"(head: {runner.head_revision()})")
    finally:
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
