"""Name server settings (each a --flag and a QUIVER_* env var)."""

import socket
from dataclasses import dataclass

from quiver.runtime.settings import ServiceSettings, setting

from .raft_key import read_key_file


@dataclass(frozen=True)
class Config(ServiceSettings):
    """Quiver name server."""
    listen: str = setting("0.0.0.0:9876", "HOST:PORT to bind")
    scan_interval_ms: int = setting(10_000, "how often silent brokers are looked for")
    broker_expiry_ms: int = setting(120_000, "a broker silent this long is dropped")
    data_dir: str = setting("", "with --controller: where its Raft log and snapshot live (required); "
                            "otherwise unused: routes are memory only")
    namesrv: str = setting("", "unused: name servers share nothing")
    controller: bool = setting(False, "also run the failover controller: elects the master of brokers started "
                                      "with --auto-failover")
    controller_peers: str = setting("", "with --controller: every controller's Raft HOST:PORT, 'h:p;h:p;h:p' "
                                        "(this one's included)")
    controller_raft: str = setting("", "this controller's Raft HOST:PORT among --controller-peers (default: the "
                                       "peer whose port is --listen's + 1)")
    controller_key_file: str = setting("", "with --controller: the Raft key every controller shares (`quiver auth "
                                           "controller-key FILE` makes one; mode 600); empty: derived from "
                                           "--auth-dir, and with auth off the controller refuses to start")
    controller_heartbeat_timeout_ms: int = setting(1500, "a master silent this long is replaced by a member of "
                                                         "its SyncStateSet")
    controller_scan_interval_ms: int = setting(100, "how often the controller leader looks for silent masters")

    def __post_init__(self):
        if self.broker_expiry_ms < 100 or self.scan_interval_ms < 50:
            raise ValueError("broker_expiry_ms must be >= 100 and scan_interval_ms >= 50")
        if self.controller:
            if not self.data_dir:
                raise ValueError("--controller needs --data-dir (its Raft log survives restarts)")
            if self.raft_self not in self.raft_peers:
                raise ValueError(f"--controller-raft {self.raft_self or '(none)'} is not one of --controller-peers "
                                 f"{self.controller_peers!r}")
            if self.controller_key_file:
                try:
                    read_key_file(self.controller_key_file)
                except OSError as exc:
                    raise ValueError(f"--controller-key-file: {exc}") from None
            elif not self.auth_dir:
                raise ValueError("--controller needs a Raft key: --controller-key-file FILE (make one: quiver auth "
                                 "controller-key FILE) or --auth-dir; Raft traffic is never plain")
            if self.controller_heartbeat_timeout_ms < 300:
                raise ValueError("controller_heartbeat_timeout_ms must be >= 300")

    @property
    def raft_peers(self) -> list[str]:
        return [p.strip() for p in self.controller_peers.split(";") if p.strip()]

    @property
    def raft_self(self) -> str:
        if self.controller_raft:
            return self.controller_raft
        host, port = self.listen.rsplit(":", 1)
        same_port = [p for p in self.raft_peers if p.rsplit(":", 1)[1] == str(int(port) + 1)]
        if len(same_port) == 1:
            return same_port[0]
        # one port on every machine (compose): this machine's name tells them apart
        mine = {host, socket.gethostname()}
        return next((p for p in same_port if p.rsplit(":", 1)[0] in mine), "")
