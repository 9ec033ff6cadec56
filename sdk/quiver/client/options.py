"""ConsumerOptions: how a PullConsumer or PushConsumer pulls, caches, commits and rebalances.

One frozen dataclass for both consumers, defaults inline with their units in
the names (like the services' Config), checked once in __post_init__: a bad
value raises ValueError naming the field, whichever consumer it is given to.

    PullConsumer("cg", namesrv=..., options=ConsumerOptions(pull_batch_size=256))
    PushConsumer("cg", namesrv=..., consume_threads=4)      # keywords build one too

The consumers take these fields as keywords, and PushConsumer's `threads` and
`batch_size` (the API's names for consume_threads and consume_batch_size): `build`
maps them. Fields marked "push" are read by PushConsumer only. Does not own the group name (names.check_group)
nor the name-server list (ClientBase).
"""

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

from quiver.client.rebalance import RebalanceListener, strategy
from quiver.wire.schema import MAX_OFFSET


def _option(default, help: str = ""):
    # as the services' settings (quiver.runtime.settings.setting): the client layer does not import the runtime
    return dataclasses.field(default=default, metadata={"help": help})


_I31 = 2 ** 31 - 1
_DAY_MS = 24 * 3600 * 1000
# RocketMQ's messageDelayLevel, the brokers' default --delay-levels (1s 5s 10s 30s 1m ... 2h)
DELAY_LEVELS_MS = (1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000,
                   480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000)


@dataclass(frozen=True)
class ConsumerOptions:
    """A consumer's settings (both consumers unless marked push)."""
    consume_from: str | int = _option("last", "where a group with no stored offset starts: 'last', 'first' "
                                      "or an epoch-ms store time")
    allocate: object = _option("averagely", "queue allocation in the group: 'averagely', 'circle', "
                               "'consistent_hash' or fn(me, mqs, cids)")
    pull_batch_size: int = _option(32, "messages per pull request (1-1024)")
    suspend_ms: int = _option(15_000, "how long a broker holds a pull that found nothing (long polling)")
    pull_delay_on_error_ms: int = _option(1000, "wait before pulling a queue again after a failed pull")
    cached_msgs_per_queue: int = _option(1000, "pulled, unconsumed messages per queue before its pulls pause")
    cached_bytes_per_queue: int = _option(100 << 20, "push: body bytes cached per queue before its pulls pause")
    max_offset_span: int = _option(2000, "push, concurrent: pulls pause while a queue's cached offsets span more")
    commit_interval_ms: int = _option(5000, "consumed offsets are stored on the broker this often")
    auto_commit: bool = _option(True, "pull: store offsets every commit_interval_ms and on shutdown")
    wait_for_topic: bool = _option(True, "a subscribed topic that does not exist yet is waited for (logged once, "
                                   "in stats()['missing_topics'], its queues taken once created); False: "
                                   "TopicNotExistError instead (pull: from poll(); push: from start()/subscribe())")
    direct_poll: bool = _option(False, "pull: poll() with nothing buffered holds the idle queues' pulls on the "
                                "calling thread's own socket (no IO-thread hand-off on the latency path); the IO "
                                "thread then only prefetches what is stored, and a queue nobody polls is not "
                                "pulled (not for AsyncPullConsumer)")
    rebalance_interval_ms: int = _option(20_000, "queue allocation is recomputed this often (and when told)")
    heartbeat_interval_ms: int = _option(30_000, "heartbeats to every broker")
    broadcast: bool = _option(False, "push: every client takes every queue, offsets in a local file")
    consume_threads: int = _option(20, "push: listener threads (1-1000)")
    consume_batch_size: int = _option(1, "push: messages per listener call (1-1024)")
    consume_inline: bool = _option(False, "push: call the listener on the thread that received the messages "
                                   "(the IO thread; with pop=True the receive thread), no hand-off to the consume "
                                   "threads: for fast listeners, as no other queue of the consumer is pulled or "
                                   "consumed while it runs")
    max_reconsume_times: int = _option(16, "push: deliveries of a failing message before the dead-letter topic")
    suspend_current_queue_ms: int = _option(1000, "push, orderly: wait before retrying a failed batch")
    lock_interval_ms: int = _option(20_000, "push, orderly: broker queue locks are renewed this often")
    offset_dir: str | None = _option(None, "push, broadcast: where the local offset file lives "
                                     "(default $QUIVER_OFFSET_DIR or ~/.quiver_offsets)")
    instance_name: str = _option("DEFAULT", "push, broadcast: the local offset file's instance folder")
    pop: bool = _option(False, "push: POP consumption (no queue ownership; success acks, failure changes the "
                        "invisible duration to the retry delay); consume_from is 'first' or 'last'")
    pop_invisible_ms: int = _option(60_000, "push, pop: how long a received message stays invisible to the group")
    delay_levels_ms: tuple[int, ...] = _option(DELAY_LEVELS_MS, "push, pop: the delay level table (ms; the "
                                               "brokers' --delay-levels): failure n of a message waits level 2 + n, "
                                               "ConsumeResult.later(delay_level=L) level L")
    on_bad_record: Callable[[str, int, int, str], object] | None = _option(
                                    None, "fn(topic, queue_id, offset, reason), called for each pulled record "
                                    "the consumer cannot decode and skips (it is also logged and counted)")
    rebalance_listener: RebalanceListener | None = _option(None, "told of queues given to and taken from this "
                                                           "consumer (quiver.RebalanceListener)")

    def __post_init__(self):
        c = self.consume_from
        if c not in ("last", "first") and not (_is_int(c) and 0 <= c <= MAX_OFFSET):
            raise ValueError(f"consume_from is 'last', 'first' or an epoch-ms timestamp, not {c!r}")
        try:
            strategy(self.allocate)
        except ValueError as exc:
            raise ValueError(f"allocate: {exc}") from None
        for name, lo, hi in _RANGES:
            value = getattr(self, name)
            if not _is_int(value) or not lo <= value <= hi:
                raise ValueError(f"{name} must be an integer {lo}-{hi}, not {value!r}")
        if not isinstance(self.instance_name, str) or not self.instance_name:
            raise ValueError(f"instance_name must be a non-empty string, not {self.instance_name!r}")
        if self.offset_dir is not None and not isinstance(self.offset_dir, str):
            raise ValueError(f"offset_dir must be a path string, not {self.offset_dir!r}")
        for name in ("pop", "consume_inline", "direct_poll", "wait_for_topic"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, not {getattr(self, name)!r}")
        levels = self.delay_levels_ms
        if (not isinstance(levels, (tuple, list)) or not 1 <= len(levels) <= 1024
                or not all(_is_int(ms) and 0 <= ms <= 3650 * _DAY_MS for ms in levels)):
            raise ValueError(f"delay_levels_ms must be 1-1024 integers 0-{3650 * _DAY_MS} (ms), not {levels!r}")
        object.__setattr__(self, "delay_levels_ms", tuple(levels))   # hashable, as the other fields
        listener = self.rebalance_listener
        if listener is not None and not all(callable(getattr(listener, m, None)) for m in ("on_assigned", "on_revoked")):
            raise ValueError(f"rebalance_listener needs on_assigned and on_revoked methods (subclass "
                             f"quiver.RebalanceListener), not {listener!r}")
        if self.on_bad_record is not None and not callable(self.on_bad_record):
            raise ValueError(f"on_bad_record must be a function or None, not {self.on_bad_record!r}")

    @classmethod
    def build(cls, options: "ConsumerOptions | None" = None, **keywords) -> "ConsumerOptions":
        """`options` (or the defaults) with `keywords` applied: field names, or `threads` and
        `batch_size` (TypeError for an unknown one, as a constructor raises)."""
        fields = {}
        for name, value in keywords.items():
            if name in _FIELDS:
                fields[name] = value
            elif name in _SHORT:
                fields[_SHORT[name]] = value
            else:
                raise TypeError(f"unknown consumer option {name!r} (see quiver.client.options.ConsumerOptions)")
        base = options if options is not None else cls()
        if not isinstance(base, cls):
            raise TypeError(f"options must be a ConsumerOptions, not {type(base).__name__}")
        return dataclasses.replace(base, **fields) if fields else base


class ConsumerSettings(TypedDict, total=False):
    """ConsumerOptions' fields as the consumers' keyword arguments (`**settings:
    Unpack[ConsumerSettings]`), so a type checker refuses a misspelt or mistyped one; each means
    what the field of that name does. A test holds it to ConsumerOptions."""
    consume_from: str | int
    allocate: object
    pull_batch_size: int
    suspend_ms: int
    pull_delay_on_error_ms: int
    cached_msgs_per_queue: int
    cached_bytes_per_queue: int
    max_offset_span: int
    commit_interval_ms: int
    auto_commit: bool
    wait_for_topic: bool
    direct_poll: bool
    rebalance_interval_ms: int
    heartbeat_interval_ms: int
    broadcast: bool
    consume_threads: int
    consume_batch_size: int
    consume_inline: bool
    max_reconsume_times: int
    suspend_current_queue_ms: int
    lock_interval_ms: int
    offset_dir: str | None
    instance_name: str
    pop: bool
    pop_invisible_ms: int
    delay_levels_ms: tuple[int, ...]
    on_bad_record: Callable[[str, int, int, str], object] | None
    rebalance_listener: RebalanceListener | None
    threads: int          # PushConsumer's name for consume_threads
    batch_size: int       # and for consume_batch_size


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_RANGES = (("pull_batch_size", 1, 1024), ("suspend_ms", 0, _DAY_MS), ("pull_delay_on_error_ms", 1, _DAY_MS),
           ("cached_msgs_per_queue", 1, _I31), ("cached_bytes_per_queue", 1, 2 ** 62),
           ("max_offset_span", 1, _I31), ("commit_interval_ms", 1, _DAY_MS), ("rebalance_interval_ms", 1, _DAY_MS),
           ("heartbeat_interval_ms", 1, _DAY_MS), ("consume_threads", 1, 1000), ("consume_batch_size", 1, 1024),
           ("max_reconsume_times", 0, _I31), ("suspend_current_queue_ms", 0, _DAY_MS),
           ("lock_interval_ms", 1, _DAY_MS), ("pop_invisible_ms", 100, 12 * 3600 * 1000))
_FIELDS = frozenset(f.name for f in dataclasses.fields(ConsumerOptions))
# PushConsumer's keywords of the public API (`threads=20, batch_size=1`) -> their fields
_SHORT = {"threads": "consume_threads", "batch_size": "consume_batch_size"}
