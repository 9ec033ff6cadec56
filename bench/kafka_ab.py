"""The Kafka gateway against Quiver's own SDK on one cluster, same minute, alternating runs.

    python -m bench.kafka_ab                       # consume 100k x 1 KiB, 3 rounds, + e2e at 2k msg/s, 3 rounds
    python -m bench.kafka_ab --n 40000 --rounds 5 --no-e2e

Consume: a topic of 4 queues prefilled with the SDK, read by the SDK's PullConsumer (pull batch 256,
as the bench's quiver-async column) and, from a second topic filled alike, by a confluent-kafka
group consumer through the gateway (as the kafka-gateway column); the order alternates each round.
Each consume is timed from subscribe to the last message (the columns' measure: the group join,
and for librdkafka its 100 ms wait before the offset query of a group with no committed offset,
are in it) and from the first message on ("after_first": the reading alone, the ratio to judge
the gateway by), with the CPU per message of the broker, the gateway and the consumer (robust to
what else loads the machine).
Produce: each round the SDK's pipelined send_async and confluent-kafka's pipelined produce
(acks=all, linger 5 ms) through the gateway, n x 1 KiB each to a fresh topic, alternating order.
e2e: each round the SDK's and the gateway's e2e at the same rate, in alternating order, paced by
the same schedule (base.paced_runs): the SDK one sync send at a time, librdkafka a produce() at
each due time with a latency-minded user's settings (bench.peers.kafka_gateway.E2E_PRODUCER:
linger.ms 1, Nagle off; at linger.ms 0 every message is a Produce request of its own, 2,000 a
second through the gateway's Python, and the producer falls behind the rate); consumers as the
columns' (the gateway's a group consumer, fetch.min.bytes 1, fetch.wait.max.ms 50, Nagle off,
fetching before the producer starts).
`--only consume|produce|e2e` (repeatable) runs those parts alone; `--kafka-prefill` writes the
Kafka consumer's topic through the gateway (as the bench's consume does: records with their own
times) instead of with the SDK.
Prints one JSON line per measurement and the medians with the gateway/SDK ratios (and the
lowest and highest ratio of one round, `_spread`).
"""

import argparse
import json
import statistics
import time
import types

from quiver import PullConsumer

from bench.peers import base
from bench.peers.kafka_gateway import KafkaGateway, _consumer
from bench.peers.quiver_system import Client as SdkClient, QuiverAsync


def _prefill(client, topic: str, n: int) -> None:
    """n x 1 KiB into `topic` by `client` (the SDK's, or confluent-kafka's through the gateway)."""
    if client.produce(topic, n, 1024) != n:
        raise RuntimeError("prefill not fully acked")


def sdk_consume(system: KafkaGateway, sdk: SdkClient, n: int) -> tuple[float, float, dict]:
    """(msg/s from subscribe to the last message, msg/s after the first poll that returned some,
    CPU per message of each process)."""
    topic = system.new_topic()
    _prefill(sdk, topic, n)
    with PullConsumer(base.unique("ab-c"), namesrv=system.cluster.namesrv, consume_from="first",
                      pull_batch_size=256, auto_commit=False) as pc:
        with CpuMeter(system) as cpu:
            t0 = time.perf_counter()
            pc.subscribe(topic)
            return (*_timed(lambda: len(pc.poll(0.5)), n, t0), cpu.per_msg(n))


def kafka_consume(system: KafkaGateway, sdk: SdkClient, n: int, kafka_prefill: bool = False) -> tuple[float, float, dict]:
    """The same of a confluent-kafka group consumer through the gateway (the kafka-gateway column's);
    `kafka_prefill`: its topic written by confluent-kafka through the gateway, as the bench's is."""
    topic = system.new_topic()
    _prefill(system.client if kafka_prefill else sdk, topic, n)
    c = _consumer(system.conn(), base.unique("ab-c"))
    try:
        with CpuMeter(system) as cpu:
            t0 = time.perf_counter()
            c.subscribe([topic])
            return (*_timed(lambda: sum(not m.error() for m in c.consume(500, 0.5)), n, t0), cpu.per_msg(n))
    finally:
        c.close()


def sdk_produce(system: KafkaGateway, sdk: SdkClient, n: int) -> tuple[float, dict]:
    """msg/s of the SDK's pipelined send_async (the quiver-async column's produce) and the CPU per message."""
    return _produce_timed(system, lambda topic, k: sdk.produce(topic, k, 1024), n)


def kafka_produce(system: KafkaGateway, sdk: SdkClient, n: int) -> tuple[float, dict]:
    """The same of confluent-kafka's pipelined produce through the gateway (the kafka-gateway column's)."""
    return _produce_timed(system, lambda topic, k: system.client.produce(topic, k, 1024), n)


def _produce_timed(system: KafkaGateway, produce, n: int) -> tuple[float, dict]:
    topic = system.new_topic()
    produce(topic, 10)   # routes and metadata outside the timing
    with CpuMeter(system, "producer") as cpu:
        t0 = time.perf_counter()
        if produce(topic, n) != n:
            raise RuntimeError("produce not fully acked")
        return n / (time.perf_counter() - t0), cpu.per_msg(n)


class CpuMeter:
    """CPU microseconds per message of the broker, the gateway and this process (the consumer) over
    one run: what the reading costs whatever else the machine runs meanwhile."""

    def __init__(self, system: KafkaGateway, client: str = "consumer"):
        self.pids = {s.role: s.proc.pid for s in system.cluster.services if s.role in ("broker", "kafka")}
        self.client = client   # what this process is in the run

    def __enter__(self):
        self.start = {**{r: base.cpu_s(p) for r, p in self.pids.items()}, self.client: time.process_time()}
        return self

    def per_msg(self, n: int) -> dict:
        now = {**{r: base.cpu_s(p) for r, p in self.pids.items()}, self.client: time.process_time()}
        return {f"cpu_us_{r}": round((now[r] - self.start[r]) / n * 1e6, 1) for r in now}

    def __exit__(self, *exc):
        return False


def _timed(poll, n: int, t0: float) -> tuple[float, float]:
    got, first, deadline = 0, 0, time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        k = poll()
        if k and not got:
            t1, first = time.perf_counter(), k
        got += k
    if got < n:
        raise RuntimeError(f"{got} of {n} consumed")
    end = time.perf_counter()
    return n / (end - t0), (n - first) / max(1e-9, end - t1)


def sdk_e2e(system: KafkaGateway, sdk: SdkClient, rate: int, seconds: float) -> dict:
    view = types.SimpleNamespace(name="quiver-sdk", cluster=system.cluster, client=sdk, new_topic=system.new_topic)
    return QuiverAsync.e2e(view, rate, seconds)


def _spread(values: dict[str, list[float]]) -> list[float]:
    """The lowest and highest gateway/SDK ratio of one round (each round's two runs side by side)."""
    ratios = [k / s for s, k in zip(values["sdk"], values["kafka"])]
    return [round(min(ratios), 2), round(max(ratios), 2)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.kafka_ab", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="messages per consume run")
    ap.add_argument("--rounds", type=int, default=3, help="consume rounds, and e2e rounds")
    ap.add_argument("--rate", type=int, default=2000, help="e2e messages per second")
    ap.add_argument("--seconds", type=float, default=10.0, help="e2e run length")
    ap.add_argument("--no-e2e", action="store_true")
    ap.add_argument("--kafka-prefill", action="store_true",
                    help="the Kafka consumer's topic written through the gateway (records with their own times)")
    ap.add_argument("--only", action="append", choices=("consume", "produce", "e2e"),
                    help="run only these parts (repeatable)")
    args = ap.parse_args(argv)
    parts = set(args.only or ("consume", "produce", "e2e")) - ({"e2e"} if args.no_e2e else set())
    rates: dict[str, list[float]] = {"sdk": [], "kafka": []}
    steady: dict[str, list[float]] = {"sdk": [], "kafka": []}
    cpus: dict[str, list[float]] = {"sdk": [], "kafka": []}   # CPU us a message, all processes
    e2e: dict[str, list[dict]] = {"sdk": [], "kafka": []}
    produced: dict[str, list[float]] = {"sdk": [], "kafka": []}
    with KafkaGateway() as system:
        sdk = SdkClient({"namesrv": system.cluster.namesrv})
        try:
            _prefill(sdk, system.new_topic(), 1000)   # routes and connections outside the timing
            for r in range(args.rounds if "consume" in parts else 0):
                order = ("sdk", "kafka") if r % 2 == 0 else ("kafka", "sdk")
                for who in order:
                    rate, after_first, cpu = (sdk_consume(system, sdk, args.n) if who == "sdk"
                                             else kafka_consume(system, sdk, args.n, args.kafka_prefill))
                    rates[who].append(rate)
                    steady[who].append(after_first)
                    cpus[who].append(sum(cpu.values()))
                    print(json.dumps({"round": r, "consume": who, "msgs_s": round(rate),
                                      "after_first_msgs_s": round(after_first), **cpu}), flush=True)
            for r in range(args.rounds if "produce" in parts else 0):
                for who in (("sdk", "kafka") if r % 2 == 0 else ("kafka", "sdk")):
                    rate, cpu = (sdk_produce if who == "sdk" else kafka_produce)(system, sdk, args.n)
                    produced[who].append(rate)
                    print(json.dumps({"round": r, "produce": who, "msgs_s": round(rate), **cpu}), flush=True)
            for r in range(args.rounds if "e2e" in parts else 0):
                for who in (("sdk", "kafka") if r % 2 == 0 else ("kafka", "sdk")):
                    out = (sdk_e2e(system, sdk, args.rate, args.seconds) if who == "sdk"
                           else system.e2e(args.rate, args.seconds))
                    e2e[who].append(out)
                    print(json.dumps({"round": r, "e2e": who, **{k: round(v) for k, v in out.items()}}), flush=True)
        finally:
            sdk.close()
    summary: dict = {}
    if "consume" in parts:
        med = {k: statistics.median(v) for k, v in rates.items()}
        med_steady = {k: statistics.median(v) for k, v in steady.items()}
        summary.update(consume_sdk_msgs_s=round(med["sdk"]), consume_kafka_msgs_s=round(med["kafka"]),
                       consume_ratio=round(med["kafka"] / med["sdk"], 2),
                       consume_ratio_spread=_spread(rates),
                       after_first_sdk_msgs_s=round(med_steady["sdk"]),
                       after_first_kafka_msgs_s=round(med_steady["kafka"]),
                       after_first_ratio=round(med_steady["kafka"] / med_steady["sdk"], 2),
                       after_first_ratio_spread=_spread(steady),
                       cpu_us_sdk=round(statistics.median(cpus["sdk"]), 1),
                       cpu_us_kafka=round(statistics.median(cpus["kafka"]), 1))
    if "produce" in parts:
        summary.update(produce_sdk_msgs_s=round(statistics.median(produced["sdk"])),
                       produce_kafka_msgs_s=round(statistics.median(produced["kafka"])),
                       produce_ratio=round(statistics.median(produced["kafka"]) / statistics.median(produced["sdk"]), 2),
                       produce_ratio_spread=_spread(produced))
    if "e2e" in parts:
        for q in ("p50", "p99"):
            med = {k: statistics.median(x[f"e2e_{q}_us"] for x in v) for k, v in e2e.items()}
            summary.update({f"e2e_{q}_sdk_us": round(med["sdk"]), f"e2e_{q}_kafka_us": round(med["kafka"]),
                            f"e2e_{q}_ratio": round(med["kafka"] / med["sdk"], 2)})
        summary["e2e_p99_ratio_spread"] = _spread({k: [x["e2e_p99_us"] for x in v] for k, v in e2e.items()})
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
