"""Name server settings (each a --flag and a QUIVER_* env var)."""

from dataclasses import dataclass

from quiver.runtime.settings import setting


@dataclass(frozen=True)
class Config:
    """Quiver name server."""
    listen: str = setting("0.0.0.0:9876", "HOST:PORT to bind")
    scan_interval_ms: int = setting(10_000, "how often silent brokers are looked for")
    broker_expiry_ms: int = setting(120_000, "a broker silent this long is dropped")
    log_level: str = setting("INFO", "logging level")
    auth_dir: str = setting("", "auth on: the dir `quiver auth init` made (server and service keys); "
                            "empty: auth off")
    data_dir: str = setting("", "unused: the name server keeps no state on disk")
    namesrv: str = setting("", "unused: name servers share nothing")

    def __post_init__(self):
        if self.broker_expiry_ms < 100 or self.scan_interval_ms < 50:
            raise ValueError("broker_expiry_ms must be >= 100 and scan_interval_ms >= 50")
