"""The store's format version: the FORMAT file of a broker's store directory.

Owns the file and the start-time decision; not the formats themselves (commit_log,
consume_queue, index_file, checkpoint and wire/record each own theirs)::

    <store dir>/FORMAT    JSON, replaced whole (FORMAT.tmp, fsync, rename)
      {"format": 1,          the on-disk layout of everything in the directory
       "oldest_reader": 1,   the oldest format whose broker may still open it
       "written_by": "0.1.0"}  the Quiver release that wrote the file (for people)

`check(dir)` runs at every start, before anything else in the directory is opened:

    no FORMAT, no store files        a new store: FORMAT written (CURRENT)
    no FORMAT, store files present   made before the file existed, which was format 1:
                                     taken as 1, upgraded like any older format
    MIN_UPGRADABLE <= format < CURRENT   the UPGRADES steps run in place, then FORMAT rewritten
    format == CURRENT                as is
    format > CURRENT, oldest_reader <= CURRENT
                                     a newer release that older brokers can still read
                                     (it only added what they skip): used as is, the file kept
    anything else (newer, older than MIN_UPGRADABLE, unreadable)
                                     FormatError naming both versions and what to do;
                                     `python -m quiver_broker` exits EXIT_FORMAT with it

`oldest_reader` is what makes a rollback possible: a release that changes the
layout in a way older brokers survive keeps it low, one that does not raises it.
"""

import json
import logging
import os

from quiver import __version__

log = logging.getLogger(__name__)

FILE = "FORMAT"
CURRENT = 1          # the layout this release writes
MIN_UPGRADABLE = 1   # the oldest layout this release upgrades in place
OLDEST_READER = 1    # what this release writes as oldest_reader
EXIT_FORMAT = 65     # sysexits EX_DATAERR: the data, not the command, is what is wrong
STORE_ENTRIES = ("commitlog", "consumequeue", "index", "checkpoint", "metadata.db")
# format N -> N+1, each a function of the store directory; none yet (format 1 is the first)
UPGRADES: dict = {}


class FormatError(Exception):
    """The store directory cannot be opened by this release; the message says what to do."""


def read(store_dir: str) -> dict | None:
    """The FORMAT file's content (format, oldest_reader, written_by), None when there is none.
    Raises FormatError for a file that is not what this module writes."""
    path = os.path.join(store_dir, FILE)
    try:
        with open(path, "rb") as f:
            raw = f.read(4096)
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
        fmt, oldest = data["format"], data.get("oldest_reader", data["format"])
        if type(fmt) is not int or type(oldest) is not int or not 1 <= oldest <= fmt:
            raise ValueError("format and oldest_reader must be integers, 1 <= oldest_reader <= format")
    except (ValueError, KeyError, TypeError) as exc:
        raise FormatError(f"{path} is not a Quiver format file ({exc}); it was not written by a broker: restore "
                          f"it from a backup, or remove it if this directory holds a format {CURRENT} store "
                          f"(quiver {__version__})") from None
    return {"format": fmt, "oldest_reader": oldest, "written_by": str(data.get("written_by", "unknown"))[:64]}


def write(store_dir: str, fmt: int = CURRENT, oldest_reader: int = OLDEST_READER) -> None:
    """Replace FORMAT whole: a crash leaves the old file or the new one."""
    path = os.path.join(store_dir, FILE)
    tmp = path + ".tmp"
    data = json.dumps({"format": fmt, "oldest_reader": oldest_reader, "written_by": __version__}).encode()
    with open(tmp, "wb") as f:
        f.write(data + b"\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(store_dir)


def fsync_dir(path: str) -> None:
    """Make a rename or a new file in `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check(store_dir: str) -> dict:
    """Decide at start (module docstring); returns the format the directory holds now."""
    found = read(store_dir)
    if found is None:
        if not any(os.path.exists(os.path.join(store_dir, e)) for e in STORE_ENTRIES):
            write(store_dir)
            log.info("new store in %s: format %d", store_dir, CURRENT)
            return read(store_dir)
        found = {"format": 1, "oldest_reader": 1, "written_by": "a release before format versions"}
        log.info("store in %s predates the FORMAT file: taken as format 1", store_dir)
    fmt = found["format"]
    if fmt == CURRENT:
        if not os.path.exists(os.path.join(store_dir, FILE)):
            write(store_dir)
        return found
    if fmt > CURRENT:
        if found["oldest_reader"] <= CURRENT:
            log.warning("store in %s is format %d (written by quiver %s); this release (%s) writes format %d and "
                        "reads it as is, as that format allows", store_dir, fmt, found["written_by"], __version__,
                        CURRENT)
            return found
        raise FormatError(
            f"store in {store_dir} is format {fmt} (written by quiver {found['written_by']}), readable by format "
            f"{found['oldest_reader']} and later; this broker is quiver {__version__} (format {CURRENT}): start a "
            f"release that reads format {fmt} on it, or restore a backup taken by quiver {__version__} into an "
            f"empty directory")
    if fmt < MIN_UPGRADABLE:
        raise FormatError(
            f"store in {store_dir} is format {fmt} (written by quiver {found['written_by']}); quiver {__version__} "
            f"upgrades formats {MIN_UPGRADABLE}..{CURRENT} only: start an intermediate release on it first "
            f"(docs/upgrade.md)")
    return upgrade(store_dir, fmt, found["written_by"])


def upgrade(store_dir: str, fmt: int, written_by: str, steps: dict | None = None) -> dict:
    """Run the steps from `fmt` up to CURRENT in place; FORMAT moves after each step, so an
    upgrade cut short resumes at the step that did not finish."""
    steps = UPGRADES if steps is None else steps
    start = fmt
    while fmt < CURRENT:
        steps[fmt](store_dir)
        fmt += 1
        write(store_dir, fmt, min(fmt, OLDEST_READER))
    log.warning("store in %s upgraded in place from format %d (written by quiver %s) to format %d", store_dir, start,
                written_by, CURRENT)
    return read(store_dir)
