"""`quiver broker backup | restore`: snapshots of a running broker, and a data dir built from one.

`backup` asks the broker (BROKER_BACKUP, a SUPER user's right): the snapshot is written on the
broker's host, under its --backup-dir, and with `--to s3://...` uploaded from there by the
broker (its credentials, the manifest last). `restore` is offline and local: it runs the broker
package's restorer as a process (the SDK never imports a service) on this machine's disk.
"""

import json
import os
import subprocess
import sys

import click

from quiver.tools import cli_cluster
from quiver.tools.cli_common import EXIT_USAGE, finish, output_option, show

BACKUP_COLUMNS = ["path", "cut_offset", "files", "linked_files", "copied_bytes", "queues", "offsets", "took_ms"]


@click.command("backup")
@click.option("--broker", required=True, help="the broker's address HOST:PORT, or a broker name (its master)")
@click.option("--to", "name", required=True, metavar="NAME|s3://BUCKET/PREFIX",
              help="the backup's directory, relative to the broker's --backup-dir (e.g. nightly/2026-11-28), "
                   "or an object-store prefix the broker uploads it to")
@click.option("--s3-endpoint", default="", metavar="URL",
              help="with s3://: the S3-compatible endpoint (default: the broker's --s3-endpoint, else AWS)")
@click.option("--timeout", type=click.FloatRange(1), default=600.0, show_default=True,
              help="seconds to wait for the broker to finish writing it")
@output_option
@click.pass_obj
def broker_backup(obj, broker, name, s3_endpoint, timeout, output):
    """Snapshot a running broker without stopping writes: CommitLog, ConsumeQueues, index, topics,
    groups, consumer offsets and ACL, consistent at one CommitLog offset (the cut). Sealed files
    are hard-linked, the rest copied; the broker must run with --backup-dir. Exit 2 for a name
    refused, 3 if the broker failed or takes no backups. To s3://BUCKET/PREFIX the broker stages
    the snapshot under --backup-dir, uploads it with its own AWS credentials (as its tiered store
    takes them), the manifest (sizes, SHA-256) last, and deletes the staged copy.

    \b
    Examples:
      quiver broker backup --broker 127.0.0.1:10911 --to nightly/mon
      quiver broker backup --broker broker-a --to before-upgrade -o json
      quiver broker backup --broker broker-a --to s3://backups/broker-a/mon --s3-endpoint http://minio:9000
    """
    from quiver.wire.names import backup_name_problem, backup_url_problem, endpoint_problem
    url = None
    if name.startswith("s3://"):
        url, name = name, name.split("/", 3)[-1].rstrip("/")   # the prefix: the staging directory's name
        problem = backup_url_problem(url)
    else:
        problem = backup_name_problem(name)
    problem = problem or (s3_endpoint and endpoint_problem(s3_endpoint))
    if problem:
        finish(EXIT_USAGE, f"error: {problem}")
    with obj.admin() as a:
        done = a.backup(broker, name, timeout, url=url, endpoint=s3_endpoint or None)
    doc = {col: getattr(done, col) for col in BACKUP_COLUMNS}
    show(obj, output, doc, [doc], BACKUP_COLUMNS)


@click.command("restore")
@click.option("--from", "src", required=True, metavar="DIR|s3://BUCKET/PREFIX",
              help="a backup directory (as `quiver broker backup` wrote it), or the prefix it was uploaded to")
@click.option("--data-dir", required=True, type=click.Path(file_okay=False),
              help="the --data-dir of the broker that will start from it (its store goes into DATA_DIR/NAME)")
@click.option("--broker-name", default=None, help="default: the name of the broker that was backed up")
@click.option("--metadata-url", default="", help="SQLAlchemy URL of the broker's metadata database (default: "
                                                 "SQLite in the restored store)")
@click.option("--s3-endpoint", default="", metavar="URL", help="with s3://: the S3-compatible endpoint (default: AWS)")
@click.option("--s3-credentials-file", default="", metavar="FILE",
              help="with s3://: an AWS-style INI file (default: the AWS_* environment variables)")
@output_option
@click.pass_obj
def broker_restore(obj, src, data_dir, broker_name, metadata_url, s3_endpoint, s3_credentials_file, output):
    """Build a broker's store from a backup, offline: every message up to the backup's cut and the
    consumer offsets as snapshotted. Then start the broker with --data-dir DATA_DIR --broker-name
    NAME. From s3:// every object is downloaded and checked against the manifest's SHA-256
    before the store is put in place. Exit 2 if the target is not empty or the backup is not
    whole (or an object fails its check), 1 for a store format this release cannot read or an
    object store that fails.

    \b
    Examples:
      quiver broker restore --from /backups/nightly/mon --data-dir ./data/restored
      quiver broker restore --from /backups/before-upgrade --data-dir /var/lib/quiver --broker-name broker-a
      quiver broker restore --from s3://backups/broker-a/mon --s3-endpoint http://minio:9000 --data-dir ./data
    """
    if not src.startswith("s3://") and not os.path.isdir(src):
        finish(EXIT_USAGE, f"error: --from {src!r} is neither a directory nor s3://BUCKET/PREFIX")
    argv = [sys.executable, "-m", "quiver_broker.restore", "--from", src, "--data-dir", data_dir]
    for flag, value in (("--s3-endpoint", s3_endpoint), ("--s3-credentials-file", s3_credentials_file)):
        if value:
            argv += [flag, value]
    if broker_name:
        argv += ["--broker-name", broker_name]
    if metadata_url:
        argv += ["--metadata-url", metadata_url]
    try:
        proc = subprocess.run(argv, check=False, capture_output=True, text=True)
    except OSError as exc:
        finish(EXIT_USAGE, f"error: cannot run the broker's restorer ({exc})")
    if proc.returncode:
        sys.stderr.write(proc.stderr[-4000:])
        finish(EXIT_USAGE if proc.returncode == EXIT_USAGE else 1)
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    show(obj, output, doc, [doc], ["store", "broker", "cut_offset", "files", "topics", "groups", "offsets"])


def register(cli) -> None:
    for cmd in (broker_backup, broker_restore):
        cli_cluster.broker.add_command(cmd)
