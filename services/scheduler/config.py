"""Scheduler settings (each a --flag and a QUIVER_* env var)."""

import os
from dataclasses import dataclass

from quiver.runtime.settings import ServiceSettings, advertised_addr, setting


@dataclass(frozen=True)
class Config(ServiceSettings):
    """Quiver scheduler: delay levels and arbitrary delivery times."""
    listen: str = setting("0.0.0.0:10931", "HOST:PORT to bind (PING, STATUS, SCHEDULE_CANCEL)")
    advertise: str = setting("", "HOST:PORT peers and producers reach (default: from --listen)")
    data_dir: str = setting("./data/scheduler", "where the pending-timer index (SQLite) lives")
    db_url: str = setting("", "SQLAlchemy URL of the timer index (default: SQLite in --data-dir)")
    group: str = setting("SCHEDULE_CONSUMER", "consumer group of the schedulers (their offsets = progress)")
    timer_horizon_ms: int = setting(40 * 86_400_000, "furthest delivery time kept; also how long cancels are remembered")
    timer_window_ms: int = setting(30_000, "timers due within this window are held in memory")
    roll_after_ms: int = setting(24 * 3_600_000, "a pending timer whose stored copy is this old is rolled forward")
    max_reput_batch: int = setting(1024, "messages per SCHEDULE_REPUT request")
    max_reput_bytes: int = setting(4 * 1024 * 1024, "body bytes per SCHEDULE_REPUT request (keep at most the "
                                   "brokers' --max-message-bytes; a broker that names a smaller one wins)")
    reput_window: int = setting(4, "SCHEDULE_REPUT requests under way per level queue")
    pull_batch: int = setting(1024, "messages per pull of a level queue")
    buffer_per_queue: int = setting(20_000, "pulled-but-not-due messages held per level queue")
    rebalance_interval_ms: int = setting(1000, "membership check and queue allocation period")
    takeover_delay_ms: int = setting(500, "wait before starting a newly allocated queue (lets the old owner commit)")
    heartbeat_interval_ms: int = setting(5000, "heartbeats to brokers as a member of --group")
    delivered_keep_ms: int = setting(86_400_000, "delivered timers are remembered this long (cancel says too late)")

    def __post_init__(self):
        if self.max_reput_batch < 1 or self.pull_batch < 1 or self.pull_batch > 1024:
            raise ValueError("max_reput_batch must be >= 1 and pull_batch between 1 and 1024")
        if self.max_reput_bytes < 1:
            raise ValueError("max_reput_bytes must be >= 1")
        if self.timer_window_ms < 100 or self.rebalance_interval_ms < 100:
            raise ValueError("timer_window_ms and rebalance_interval_ms must be >= 100")

    @property
    def advertised(self) -> str:
        return advertised_addr(self.listen, self.advertise)

    @property
    def url(self) -> str:
        return self.db_url or f"sqlite:///{os.path.join(self.data_dir, 'timers.db')}"
