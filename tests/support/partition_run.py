"""One partition scenario from start to verdict: load on (producers, a pull group and a push
group, all in the clients' namespace), the cut the scenario makes, the heal, the group back in
sync, the consumers caught up, the log read back from the master and every replica's CommitLog
compared with it, and the checker's report (support/partition_check.py)."""

import json
import os
import random
import time

from .partition_check import Report, check
from .partition_cluster import PartitionCluster

TOPIC, QUEUES = "PartT", 4
GROUPS = ("g-pull", "g-push")


def read_jsonl(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            if line.endswith("\n"):       # a killed writer's last line may be cut
                out.append(json.loads(line))
    return out


class Scenario:
    def __init__(self, cluster: PartitionCluster, producers: int = 2):
        self.c = cluster
        self.rec = os.path.join(cluster.root, "records")
        os.makedirs(self.rec, exist_ok=True)
        self.producers = producers
        self.events: list[tuple[float, str]] = []   # (monotonic, what) for the report

    def note(self, what: str) -> None:
        self.events.append((time.monotonic(), what))

    def setup(self) -> dict:
        g = self.c.wait_group(self.c.n_brokers)
        self.c.call("topic", topic=TOPIC, queues=QUEUES)
        self.c.wait_topics(1)
        return g

    def start_load(self) -> None:
        self.prods = [self.c.client("produce", "--topic", TOPIC, "--name", f"p{w}",
                                    "--out", f"{self.rec}/acks-{w}.jsonl", log=f"produce-{w}.log")
                      for w in range(self.producers)]
        self.cons = [self.c.client("pull", "--topic", TOPIC, "--group", GROUPS[0],
                                   "--out", f"{self.rec}/{GROUPS[0]}.jsonl", log="pull.log"),
                     self.c.client("push", "--topic", TOPIC, "--group", GROUPS[1],
                                   "--out", f"{self.rec}/{GROUPS[1]}.jsonl", log="push.log")]

    def acks(self) -> list[dict]:
        return [a for w in range(self.producers) for a in read_jsonl(f"{self.rec}/acks-{w}.jsonl")]

    def deliveries(self) -> list[dict]:
        return [d for g in GROUPS for d in read_jsonl(f"{self.rec}/{g}.jsonl")]

    def wait_acks(self, more_than: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acks()) <= more_than:
            if time.monotonic() > deadline:
                raise AssertionError(f"no more than {more_than} SEND_OK within {timeout} s; see {self.c.root}")
            time.sleep(0.2)

    def finish(self, settle_s: float = 1.0, catch_up_s: float = 45.0) -> Report:
        """After the heal: the group whole again, a little more load, producers stopped, the log
        read back from the master, the consumers given until they have every acked message it
        holds (or nothing new came for 10 s), then everything checked."""
        g = self.c.wait_group(self.c.n_brokers, timeout=90)
        self.note(f"healed: master {g['master']} epoch {g['epoch']}")
        time.sleep(settle_s)
        self.c.stop_clients(self.prods)
        g = self.c.wait_group(self.c.n_brokers, timeout=60)
        master = self.c.node_of(g["master"])
        self.converged = self.logs_equal(master)
        final = self.c.read_back(master, TOPIC, QUEUES)
        want = {a["id"] for a in self.acks()} & {i for rows in final.values() for _, i, _ in rows}
        deadline, last, still = time.monotonic() + catch_up_s, -1, time.monotonic()
        while time.monotonic() < deadline:
            ds = self.deliveries()
            if all(want <= {d["id"] for d in ds if d["g"] == g} for g in GROUPS):
                break
            if len(ds) != last:
                last, still = len(ds), time.monotonic()
            elif time.monotonic() - still > 10:   # nothing new for 10 s: what is missing stays missing
                break
            time.sleep(0.5)
        self.c.stop_clients(self.cons)
        return check(self.acks(), final, self.deliveries(), groups=GROUPS, ordered_groups=(GROUPS[0],))

    def timings(self, cut_at: float, old_master: str) -> dict:
        """Seconds from the cut to the first SEND_OK stored elsewhere (failover) and to the old
        master's last SEND_OK sent after the cut (how long it went on acknowledging)."""
        acks = [a for a in self.acks() if a["ts"] >= cut_at]
        old = self.c.broker_addr(old_master)
        new = [a["tr"] for a in acks if a["b"] != old]
        went_on = [a["tr"] for a in acks if a["b"] == old]
        return {"failover_s": round(min(new) - cut_at, 2) if new else None,
                "old_master_acked_s": round(max(went_on) - cut_at, 2) if went_on else 0.0}

    def logs_equal(self, master: str, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        nodes = [f"b{j}" for j in range(1, self.c.n_brokers + 1)]
        while True:
            want = self.c.log_bytes(master)
            if all(self.c.log_bytes(n) == want for n in nodes):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.3)

    # ---- the cuts ------------------------------------------------------------------------------

    def hold(self, seconds: float) -> None:
        """Wait out the cut, noting each change of who claims the Raft lead and which master
        (epoch) each leader names, as the clients' namespace sees the controllers."""
        end, seen = time.monotonic() + seconds, None
        while time.monotonic() < end:
            answers = self.c.call("info")["answers"]
            now = sorted((self.c.node_of(ns), a["master"] and self.c.node_of(a["master"]), a["epoch"])
                         for ns, a in answers.items() if a and a["leader"])
            if now != seen:
                self.note(f"Raft leaders (node, master, epoch): {now}")
                seen = now
            time.sleep(0.2)

    def flap(self, seconds: float, seed: int) -> list[str]:
        """Random cuts for `seconds`: each step a random partition, a one-way cut of a random
        pair, or a heal, held 1-4 s; healed at the end. Returns the steps (with the seed)."""
        rnd = random.Random(seed)
        nodes = [n for n in self.c.net.nodes if n != "cli"]
        steps = [f"seed {seed}"]
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            kind = rnd.choice(["partition", "partition", "oneway", "heal"])
            self.c.net.heal()
            if kind == "partition":
                side = set(rnd.sample(nodes, rnd.randint(1, len(nodes) // 2)))
                self.c.net.partition(side, set(nodes) - side)
                steps.append(f"{sorted(side)} | rest")
            elif kind == "oneway":
                a, b = rnd.sample(nodes, 2)
                self.c.net.cut(a, b, both=False)
                steps.append(f"{a} -> {b} dropped")
            else:
                steps.append("healed")
            time.sleep(min(rnd.uniform(1.0, 4.0), max(0.0, end - time.monotonic())))
        self.c.net.heal()
        return steps
