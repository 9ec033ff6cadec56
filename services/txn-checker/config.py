"""txn-checker settings (each a --flag and a QUIVER_* env var). Defaults are RocketMQ 5's."""

from dataclasses import dataclass

from quiver.runtime.settings import ServiceSettings, advertised_addr, setting


@dataclass(frozen=True)
class Config(ServiceSettings):
    """Quiver txn-checker: asks producer groups about transactions left open."""
    listen: str = setting("0.0.0.0:10941", "HOST:PORT to bind (PING, STATUS)")
    advertise: str = setting("", "HOST:PORT peer checkers reach (default: from --listen)")
    data_dir: str = setting("./data/txn-checker", "unused: progress is kept as consumer offsets on the brokers")
    group: str = setting("CID_RMQ_SYS_TRANS", "consumer group of the checkers (their offsets = progress)")
    check_interval_ms: int = setting(30_000, "how often open transactions are looked for")
    transaction_timeout_ms: int = setting(6_000, "a half message younger than this is not checked yet")
    max_checks: int = setting(15, "check-backs per transaction before it is discarded to TRANS_CHECK_MAX_TIME_TOPIC")
    check_batch: int = setting(512, "half messages per TRANSACTION_CHECK request")
    pull_batch: int = setting(1024, "half / op messages per pull")
    round_budget_ms: int = setting(60_000, "time one round may spend on one broker (RocketMQ: 60 s per queue)")
    heartbeat_interval_ms: int = setting(10_000, "heartbeats to brokers as a member of --group")

    def __post_init__(self):
        if self.check_interval_ms < 10 or self.transaction_timeout_ms < 0 or self.max_checks < 1:
            raise ValueError("check_interval_ms must be >= 10, transaction_timeout_ms >= 0, max_checks >= 1")
        if not 1 <= self.pull_batch <= 1024 or self.check_batch < 1:
            raise ValueError("pull_batch must be between 1 and 1024 and check_batch >= 1")

    @property
    def advertised(self) -> str:
        return advertised_addr(self.listen, self.advertise)
