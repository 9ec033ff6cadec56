"""A broker's stable name in a shared data volume: the `broker-N` slot it claims.

Under compose every replica of broker-store mounts the same volume, and its
hostname (the container id) changes whenever the container is recreated
(`down` + `up`, a new image, a changed setting), so a name derived from the
hostname orphans the data. With `--broker-name auto` a broker claims a slot
instead and keeps that name while it advertises its current hostname:

    <data-dir>/
      broker-1/        the store of the process holding broker-1.lock
      broker-1.lock    flock(LOCK_EX), held by that process until it exits;
                       its text says who holds it ("hostname pid"), for people
      broker-2/ ...

The kernel drops a flock when its holder exits, however it exits (SIGTERM,
kill -9, the container removed), so a restarted or recreated broker finds its
slot free and serves the old data again. The slot this hostname held last is
tried first (so a `docker compose restart` of several brokers at once does not
swap names between addresses), then the other existing slots, lowest number
first, then the lowest unused number: scaling down then up serves old data
before any new slot is made. Two brokers never hold one slot, even when they
race to create it, because the lock decides, not the listing.

Owns: choosing and locking the slot. Does not own: the store's files inside
the slot (store.py), the advertised address (config.py), or what a slot held
under a hostname-derived name before (rename such a directory to `broker-N`).
"""

import fcntl
import logging
import os
import re
import socket
from dataclasses import dataclass

from quiver.wire import names

log = logging.getLogger(__name__)

SLOT_PREFIX = "broker-"
MAX_SLOTS = 10_000  # far more replicas than one volume serves; a bound, not a plan
_SLOT_RE = re.compile(r"^broker-([1-9][0-9]*)(?:\.lock)?$")


@dataclass(frozen=True)
class Slot:
    """A claimed slot. `fd` holds the lock: it is closed only by `release()` or when the
    process exits (a raw descriptor has no finalizer, so dropping the Slot keeps the lock)."""
    name: str
    path: str
    fd: int

    def release(self) -> None:
        os.close(self.fd)


def existing_slots(data_dir: str) -> list[int]:
    """Slot numbers with a directory or a lock file in `data_dir`, ascending."""
    try:
        entries = os.listdir(data_dir)
    except FileNotFoundError:
        return []
    return sorted({int(m.group(1)) for m in map(_SLOT_RE.match, entries) if m})


def last_held_by(data_dir: str, existing: list[int], hostname: str) -> list[int]:
    """The slots whose holder note names `hostname` (a restarted container keeps its hostname)."""
    out = []
    for number in existing:
        try:
            with open(names.confine(data_dir, f"{SLOT_PREFIX}{number}.lock"), "rb") as f:
                note = f.read(512).split()
        except OSError:
            continue
        if note and note[0] == hostname.encode():
            out.append(number)
    return out


def candidates(existing: list[int], preferred: list[int] = ()):
    """`preferred`, then the other existing slots, then unused numbers from the lowest up."""
    yield from preferred
    yield from (n for n in existing if n not in preferred)
    taken = set(existing)
    yield from (n for n in range(1, MAX_SLOTS + 1) if n not in taken)


def try_claim(data_dir: str, number: int) -> Slot | None:
    """Lock slot `number` without waiting; None when a live process holds it."""
    name = f"{SLOT_PREFIX}{number}"
    lock_path = names.confine(data_dir, f"{name}.lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by children (PEP 446)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{socket.gethostname()} {os.getpid()}\n".encode(), 0)
    path = names.confine(data_dir, name)
    os.makedirs(path, exist_ok=True)
    return Slot(name, path, fd)


def claim_slot(data_dir: str) -> Slot:
    """The first free slot of `data_dir` (created when every existing one is held)."""
    os.makedirs(data_dir, exist_ok=True)
    existing = existing_slots(data_dir)
    for number in candidates(existing, last_held_by(data_dir, existing, socket.gethostname())):
        slot = try_claim(data_dir, number)
        if slot is not None:
            state = "its data kept" if number in existing else "new"
            log.info("claimed broker slot %s in %s (%s; held while this process runs)", slot.name, data_dir, state)
            return slot
    raise RuntimeError(f"no free broker slot among {MAX_SLOTS} in {data_dir}")
