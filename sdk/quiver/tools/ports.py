"""Is a TCP port taken, and by which process: `quiver up` checks every port it will bind before it
starts anything (a name server that dies on a taken port leaves the health check to whatever
answers there, and the brokers register with a stranger's cluster).

The holder is read from /proc (Linux): the listening socket's inode, then the process whose fd
points at it. Processes of other users are not readable: then only the port is named.
"""

import os
import socket


def taken(host: str, port: int) -> bool:
    """True when a listener holds `port` (SO_REUSEADDR as zmq binds: a TIME_WAIT is no conflict)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def _listen_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def holder(port: int) -> str | None:
    """'pid N (command line)' of the process listening on `port`, when /proc lets us see it."""
    inodes = {f"socket:[{i}]" for i in _listen_inodes(port)}
    if not inodes:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if not any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in fds):
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        return f"pid {pid} ({cmd[:120]})"
    return None


def conflicts(host: str, wanted: list[tuple[str, int]]) -> list[str]:
    """One line per (service, port) of `wanted` that is taken, naming its holder if known."""
    out = []
    for service, port in wanted:
        if taken(host, port):
            who = holder(port)
            out.append(f"port {port} ({service}) is taken{' by ' + who if who else ''}")
    return out
