"""Filter server settings (each a --flag and a QUIVER_* env var)."""

from dataclasses import dataclass

from quiver.runtime.settings import ServiceSettings, advertised_addr, setting


@dataclass(frozen=True)
class Config(ServiceSettings):
    """Quiver SQL92 filter server."""
    listen: str = setting("0.0.0.0:10921", "HOST:PORT to bind")
    advertise: str = setting("", "HOST:PORT consumers reach (default: hostname:port, 127.0.0.1 on a local bind)")
    namesrv: str = setting("127.0.0.1:9876", "name servers, 'h:p;h:p' (used to pick a broker when --broker is not given)")
    broker: str = setting("", "HOST:PORT of the broker this filter server serves (default: the one with fewest filter servers)")
    data_dir: str = setting("", "unused: a filter server keeps no state on disk")
    register_interval_ms: int = setting(10_000, "re-register with the broker this often (it expires us after 30 s)")
    scan_batch: int = setting(512, "records pulled from the broker per scan step")
    max_reply_messages: int = setting(1024, "most matches returned by one pull")
    max_reply_bytes: int = setting(4 * 1024 * 1024, "largest reply body")
    long_poll_max_ms: int = setting(30_000, "cap on a pull's suspend time")
    broker_timeout_ms: int = setting(5_000, "deadline of a broker call beyond its suspend time")
    selector_cache: int = setting(1024, "compiled selectors kept, per (group, topic, expression)")

    def __post_init__(self):
        if not 1 <= self.scan_batch <= 1024:
            raise ValueError("scan_batch must be between 1 and 1024 (the broker's cap)")
        if self.register_interval_ms < 100:
            raise ValueError("register_interval_ms must be >= 100")

    @property
    def advertised(self) -> str:
        return advertised_addr(self.listen, self.advertise)
