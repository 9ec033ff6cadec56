"""Real network partitions for tests/partition: one network namespace per node, each joined by a
veth pair to a Linux bridge that lives in a namespace of its own (the host's namespace gets no
address and no route), and nft drop rules inside the nodes' namespaces to cut links, one
direction or both, per pair of nodes. Names carry a per-run prefix (qp<pid>); remove() deletes
every namespace made (their veths and rules go with them) and is safe to call twice."""

import os
import subprocess

SUBNET = "10.213.0"   # the nodes' addresses: 10.213.0.11, .12, ...; only inside the suite's namespaces
TABLE = "qpcut"


def run(*argv: str, stdin: str | None = None) -> str:
    r = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def available() -> str | None:
    """Why this machine cannot run the partition suite, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth, nft)"
    for tool in ("ip", "nft"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode != 0:
            return f"needs `{tool}` (apt-get install iproute2 nftables)"
    return None


class Net:
    """Namespaces named `<prefix>-<node>`; `addr[node]` its address on the bridge."""

    def __init__(self, nodes: list[str], prefix: str | None = None):
        self.prefix = prefix or f"qp{os.getpid()}"
        self.switch = f"{self.prefix}-sw"
        self.nodes = list(nodes)
        self.addr = {n: f"{SUBNET}.{11 + i}" for i, n in enumerate(self.nodes)}
        self.made: list[str] = []
        self.cuts: set[tuple[str, str]] = set()   # (a, b): a's packets to b are dropped

    def ns(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    def create(self) -> "Net":
        self._add_ns(self.switch)
        run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", self.switch, "link", "set", "br0", "up")
        for i, node in enumerate(self.nodes):
            ns = self.ns(node)
            self._add_ns(ns)
            # both ends made inside the namespaces: no interface ever shows in the host's namespace
            run("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}", "netns", self.switch)
            run("ip", "-n", self.switch, "link", "set", f"p{i}", "master", "br0", "up")
            run("ip", "-n", ns, "addr", "add", f"{self.addr[node]}/24", "dev", "eth0")
            run("ip", "-n", ns, "link", "set", "eth0", "up")
            run("ip", "netns", "exec", ns, "nft", "-f", "-", stdin=(
                f"table inet {TABLE} {{\n"
                f"  chain out {{ type filter hook output priority 0; policy accept; }}\n"
                f"  chain in {{ type filter hook input priority 0; policy accept; }}\n}}\n"))
        return self

    def _add_ns(self, ns: str) -> None:
        run("ip", "netns", "add", ns)
        self.made.append(ns)
        run("ip", "-n", ns, "link", "set", "lo", "up")

    def exec_prefix(self, node: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns(node)]

    # ---- cuts ----------------------------------------------------------------------------------

    def cut(self, a: str, b: str, both: bool = True) -> None:
        """Drop a's packets to b (and b's to a when `both`)."""
        self.cuts.add((a, b))
        if both:
            self.cuts.add((b, a))
        self._apply({a, b})

    def partition(self, *sides: set[str]) -> None:
        """Nodes in different sides no longer reach each other; a node in no side reaches all."""
        for i, s in enumerate(sides):
            for other in sides[i + 1:]:
                for a in s:
                    for b in other:
                        self.cuts |= {(a, b), (b, a)}
        self._apply(set().union(*sides))

    def heal(self) -> None:
        touched = {a for a, _ in self.cuts} | {b for _, b in self.cuts}
        self.cuts.clear()
        self._apply(touched)

    def _apply(self, nodes: set[str]) -> None:
        """Each node's rules rewritten at once: its output to the cut peers and its input from
        the peers cut towards it are dropped (the input rule only matters inside one host)."""
        for node in sorted(nodes):
            outs = sorted(self.addr[b] for a, b in self.cuts if a == node)
            ins = sorted(self.addr[a] for a, b in self.cuts if b == node)
            script = [f"flush chain inet {TABLE} out", f"flush chain inet {TABLE} in"]
            if outs:
                script.append(f"add rule inet {TABLE} out ip daddr {{ {', '.join(outs)} }} drop")
            if ins:
                script.append(f"add rule inet {TABLE} in ip saddr {{ {', '.join(ins)} }} drop")
            run("ip", "netns", "exec", self.ns(node), "nft", "-f", "-", stdin="\n".join(script) + "\n")

    def rules(self, node: str) -> str:
        return run("ip", "netns", "exec", self.ns(node), "nft", "list", "table", "inet", TABLE)

    # ---- teardown ------------------------------------------------------------------------------

    def remove(self) -> list[str]:
        """Delete every namespace this run made; returns the errors (teardown goes on past them)."""
        errors = []
        for ns in reversed(self.made):
            r = subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True)
            if r.returncode != 0 and "No such file" not in r.stderr:
                errors.append(f"{ns}: {r.stderr.strip()}")
        self.made.clear()
        return errors


def leftovers(prefix: str) -> list[str]:
    """Namespaces whose name starts with `prefix` (a test checks none outlive the run)."""
    out = run("ip", "netns", "list")
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]
