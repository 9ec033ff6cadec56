"""Broker settings (each a --flag and a QUIVER_* env var). Defaults are RocketMQ's."""

from dataclasses import dataclass

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from quiver.wire import names
from quiver.errors import QuiverError
from quiver.runtime.settings import ServiceSettings, advertised_addr, default_identity, setting

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
ROLES = ("SYNC_MASTER", "ASYNC_MASTER", "SLAVE")
AUTO_NAME = "auto"  # --broker-name auto: claim a broker-N slot of --data-dir (identity.py)
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> list[int]:
    """'1s 5s 1m' -> [1000, 5000, 60000]."""
    out = []
    for item in text.split():
        unit = "ms" if item.endswith("ms") else item[-1]
        num = item[:-len(unit)]
        if unit not in _UNITS_MS or not num.isdigit():
            raise ValueError(f"bad delay level {item!r}: use a number with ms, s, m, h or d")
        out.append(int(num) * _UNITS_MS[unit])
    if not out:
        raise ValueError("delay levels are empty")
    return out


DEFAULT_DELAY_LEVELS_MS = tuple(parse_delay_levels(DEFAULT_DELAY_LEVELS))  # RocketMQ's messageDelayLevel


@dataclass(frozen=True)
class Config(ServiceSettings):
    """Quiver broker-store."""
    listen: str = setting("0.0.0.0:10911", "HOST:PORT to bind")
    advertise: str = setting("", "HOST:PORT clients reach (default: hostname:port, 127.0.0.1 on a local bind)")
    data_dir: str = setting("./data/broker", "where the store lives (a per-broker sub-directory is used)")
    broker_name: str = setting("", "broker name (default: broker-<hostname>); 'auto': claim a free broker-N "
                                   "slot of --data-dir, kept across container re-creation")
    broker_id: int = setting(0, "0 = master")
    cluster: str = setting("DefaultCluster", "cluster name")
    flush: str = setting("async", "sync | async: SEND_OK after fdatasync, or background flush")
    flush_interval_ms: int = setting(500, "async flush period")
    sync_flush_timeout_ms: int = setting(5000, "sync flush deadline before FLUSH_DISK_TIMEOUT")
    segment_bytes: int = setting(1 << 30, "CommitLog segment size")
    cq_entries_per_file: int = setting(300_000, "ConsumeQueue entries per file")
    index_slots: int = setting(5_000_000, "IndexFile hash slots")
    index_entries: int = setting(20_000_000, "IndexFile entries per file")
    metadata_url: str = setting("", "SQLAlchemy URL for topics/groups/offsets (default, also when empty: SQLite in "
                                    "data dir); brokers may share one database, each keeps its own rows")
    metadata_wait_ms: int = setting(60_000, "at start, retry a metadata database that refuses connections this "
                                            "long (a PostgreSQL starting next to the broker)")
    register_interval_ms: int = setting(30_000, "re-register with name servers this often")
    auto_create_topics: bool = setting(True, "create a topic on first send")
    default_topic_queues: int = setting(4, "queues of an auto-created topic")
    metrics_per_queue: bool = setting(False, "consumer lag and offset metrics per queue (a queue_id label), "
                                             "not per group and topic: one series per queue")
    max_message_bytes: int = setting(4 * 1024 * 1024, "largest body accepted")
    delay_levels: str = setting(DEFAULT_DELAY_LEVELS, "delay level table (units ms, s, m, h, d)")
    timer_horizon_ms: int = setting(40 * 86_400_000, "furthest allowed delivery time of a timer message")
    file_reserved_hours: int = setting(72, "CommitLog retention")
    delete_when: str = setting("04", "hours of day when expired segments are deleted, 'HH;HH'")
    delete_retention_ms: int = setting(86_400_000, "compacted topics: a tombstone (empty body with a key) is "
                                                   "kept this long, then its key is removed")
    compaction_interval_ms: int = setting(60_000, "compacted topics: a compaction pass over their sealed "
                                                  "segments this often")
    compaction_bytes_per_s: int = setting(64 << 20, "compacted topics: read/write rate of a compaction pass "
                                                    "(0: no limit)")
    tiered_store: str = setting("", "copy sealed CommitLog segments to s3://BUCKET/PREFIX or file:///path and "
                                    "serve offsets no longer local from there (empty: off)")
    s3_endpoint: str = setting("", "with an s3:// tiered store: the S3-compatible endpoint URL (default: AWS)")
    s3_credentials_file: str = setting("", "with an s3:// tiered store: an AWS-style INI file with "
                                           "aws_access_key_id / aws_secret_access_key (default: AWS_* env vars)")
    local_retention_hours: float = setting(72, "with a tiered store: uploaded segments older than this leave "
                                               "the local disk (< 0: no age limit)")
    local_retention_bytes: int = setting(-1, "with a tiered store: keep at most this much of the uploaded "
                                             "segments locally (< 0: no size limit)")
    remote_retention_days: float = setting(0, "with a tiered store: delete remote segments older than this "
                                              "(0: keep forever)")
    tiered_cache_bytes: int = setting(256 << 20, "with a tiered store: cache of verified remote chunks")
    offset_persist_interval_ms: int = setting(5000, "consumer offsets are written this often")
    drain_timeout_ms: int = setting(6000, "on SIGTERM: wait this long for the sends in flight to be answered "
                                          "before stopping (within Docker's 10 s stop grace period)")
    backup_dir: str = setting("", "where `quiver broker backup` writes snapshots of this broker (on its data "
                                  "dir's filesystem, so sealed files are hard-linked); empty: backups refused")
    clean_interval_ms: int = setting(10_000, "retention check period")
    disk_max_used_ratio: float = setting(0.75, "above this used share of the store's disk, expired segments "
                                               "are deleted in any hour (RocketMQ diskMaxUsedSpaceRatio)")
    disk_clean_forcibly_ratio: float = setting(0.85, "above: the oldest segments go even if not expired; a "
                                                     "full disk takes writes again below it")
    disk_full_ratio: float = setting(0.90, "above: puts refused with SERVICE_NOT_AVAILABLE before anything is "
                                           "written (RocketMQ diskSpaceWarningLevelRatio)")
    disk_min_free_bytes: int = setting(16 * 1024 * 1024, "puts refused while less than this is free on the disk")
    disk_check_bytes: int = setting(4 * 1024 * 1024, "bytes written between two statvfs checks of the disk (at most)")
    disk_check_interval_ms: int = setting(100, "the disk is checked again after this long (other writers)")
    logic_flush_interval_ms: int = setting(1000, "ConsumeQueue/index fsync and checkpoint period "
                                                 "(RocketMQ flushIntervalConsumeQueue)")
    append_prop_crc: bool = setting(False, "end each record with a __CRC32# property (CRC of the whole record), "
                                           "so served records are checked beyond their body (RocketMQ "
                                           "enabledAppendPropCRC); costs 20 bytes and a CRC per message")
    long_poll_max_ms: int = setting(30_000, "cap on a pull's suspend time")
    client_expiry_ms: int = setting(120_000, "drop a client silent this long (RocketMQ channelExpiredTimeout)")
    role: str = setting("", "SYNC_MASTER | ASYNC_MASTER | SLAVE (default: ASYNC_MASTER for id 0, SLAVE otherwise)")
    ha_listen: str = setting("", "master: HOST:PORT of the replication socket (default: listen port + 1)")
    ha_master: str = setting("", "slave: the master's HA HOST:PORT (default: learnt from the name servers)")
    slave_timeout_ms: int = setting(3000, "SYNC_MASTER: wait for a slave's ack this long, then FLUSH_SLAVE_TIMEOUT")
    ha_transfer_bytes: int = setting(256 * 1024, "CommitLog bytes per replication frame (whole records)")
    ha_window_bytes: int = setting(4 * 1024 * 1024, "bytes a master streams to a slave ahead of its ack")
    ha_max_gap_bytes: int = setting(256 * 1024 * 1024, "SYNC_MASTER: a slave further behind is not in sync")
    ha_heartbeat_interval_ms: int = setting(5000, "replication heartbeat period (both ends)")
    ha_housekeeping_ms: int = setting(20_000, "a replication peer silent this long is dropped / reconnected")
    ha_sync_interval_ms: int = setting(10_000, "slave: topics and consumer offsets synced from the master this often")
    auto_failover: bool = setting(False, "no fixed role: the controller (name servers started with --controller) "
                                         "makes this broker master or slave, and replaces a silent master")
    controller: str = setting("", "with --auto-failover: the controllers, 'h:p;h:p;h:p' (default: --namesrv)")
    controller_heartbeat_interval_ms: int = setting(300, "with --auto-failover: heartbeat to the controllers "
                                                         "this often")
    min_in_sync_replicas: int = setting(1, "with --auto-failover and SYNC acks: refuse writes while the "
                                           "SyncStateSet (master included) is smaller than this")
    ha_max_time_not_caught_up_ms: int = setting(3000, "with --auto-failover: a replica behind the master this long "
                                                      "leaves the SyncStateSet (it can no longer be elected)")
    ha_acks: str = setting("sync", "with --auto-failover: sync = SEND_OK once every SyncStateSet member has the "
                                   "message; async = at once")

    def __post_init__(self):
        if self.flush not in ("sync", "async"):
            raise ValueError("flush must be 'sync' or 'async'")
        parse_delay_levels(self.delay_levels)
        if self.segment_bytes < 4096:
            raise ValueError("segment_bytes must be >= 4096")
        if not 0 < self.disk_clean_forcibly_ratio <= self.disk_full_ratio <= 1:
            raise ValueError("disk ratios must be 0 < disk_clean_forcibly_ratio <= disk_full_ratio <= 1")
        if self.role and self.role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}")
        if self.broker_id < 0:
            raise ValueError("broker_id must be >= 0")
        if self.auto_failover:
            if self.role:
                raise ValueError("--auto-failover takes no --role: the controller assigns it")
            if self.ha_acks not in ("sync", "async") or self.min_in_sync_replicas < 1:
                raise ValueError("ha_acks must be 'sync' or 'async' and min_in_sync_replicas >= 1")
            if self.controller_heartbeat_interval_ms < 20:
                raise ValueError("controller_heartbeat_interval_ms must be >= 20")
        elif (self.broker_id == 0) == (self.ha_role == "SLAVE"):
            raise ValueError("broker id 0 is the master (SYNC_MASTER or ASYNC_MASTER); ids >= 1 are slaves (SLAVE)")
        if self.auto_name and self.broker_id != 0:
            raise ValueError("--broker-name auto is for masters (id 0): a slave names its master's broker")
        if self.metadata_url.strip():
            try:
                make_url(self.metadata_url)
            except ArgumentError:
                raise ValueError(f"metadata_url {self.metadata_url!r} is not a SQLAlchemy URL (e.g. "
                                 "postgresql+psycopg://user:password@host/db); empty: SQLite in the data dir") from None
        if self.metadata_wait_ms < 0:
            raise ValueError("metadata_wait_ms must be >= 0")
        if self.ha_transfer_bytes < 4096 or self.ha_window_bytes < self.ha_transfer_bytes:
            raise ValueError("ha_transfer_bytes must be >= 4096 and <= ha_window_bytes")
        if self.tiered_store:
            from .tiered_store import parse_url
            parse_url(self.tiered_store)  # ValueError saying what to fix
            if self.auto_failover or self.broker_id != 0:
                raise ValueError("--tiered-store is for a master (broker id 0, no --auto-failover)")
            if self.tiered_cache_bytes < 1 << 16:
                raise ValueError("tiered_cache_bytes must be >= 65536")
        try:  # the broker name becomes a directory, both names travel in registrations
            names.check_broker_name(self.name)
            names.check_cluster(self.cluster)
        except QuiverError as exc:
            raise ValueError(exc.remark) from None

    @property
    def auto_name(self) -> bool:
        """True until __main__ replaces `auto` with the slot it claimed; App never sees it."""
        return self.broker_name == AUTO_NAME

    @property
    def name(self) -> str:
        return self.broker_name or default_identity("broker")

    @property
    def advertised(self) -> str:
        return advertised_addr(self.listen, self.advertise)

    @property
    def store_dir(self) -> str:
        # a slave shares its master's broker name, never its directory
        sub = self.name if self.broker_id == 0 else f"{self.name}-{self.broker_id}"
        return names.confine(self.data_dir, sub)  # resolved, and never outside --data-dir

    @property
    def ha_role(self) -> str:
        """The role at start; with --auto-failover "AUTO" (replicas.Replicas has the current one)."""
        if self.auto_failover:
            return "AUTO"
        return self.role or ("ASYNC_MASTER" if self.broker_id == 0 else "SLAVE")

    @property
    def controllers(self) -> str:
        return self.controller or self.namesrv

    @property
    def is_slave(self) -> bool:
        return self.ha_role == "SLAVE"

    @property
    def ha_bind(self) -> str:
        """Where a master's HA socket binds; derived from --listen (port + 1) unless set."""
        if self.ha_listen:
            return self.ha_listen
        host, port = self.listen.rsplit(":", 1)
        return f"{host}:{int(port) + 1}"

    @property
    def ha_advertised(self) -> str:
        """The HA address slaves are told (name server registration)."""
        host, port = self.ha_bind.rsplit(":", 1)
        if host in ("0.0.0.0", "", "*"):
            host = self.advertised.rsplit(":", 1)[0]
        return f"{host}:{port}"

    @property
    def delay_levels_ms(self) -> list[int]:
        return parse_delay_levels(self.delay_levels)

    @property
    def delete_when_hours(self) -> tuple[int, ...]:
        return tuple(int(h) for h in self.delete_when.replace(",", ";").split(";") if h.strip())
