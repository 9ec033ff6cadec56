"""The systems the bench knows, their names and aliases on the command line, and their modules.

Modules are imported lazily so `--only quiver` needs none of the peer client libraries.
"""

import importlib

# name -> (module, class); order = column order in the table
SYSTEMS = {
    "ceilings": ("bench.peers.ceilings", "Ceilings"),
    "floor": ("bench.peers.floor", "Floor"),
    "quiver-async": ("bench.peers.quiver_system", "QuiverAsync"),
    "quiver-sync": ("bench.peers.quiver_system", "QuiverSync"),
    "quiver-auth": ("bench.peers.quiver_system", "QuiverAuth"),
    "quiver-trace": ("bench.peers.quiver_system", "QuiverTrace"),
    "redis": ("bench.peers.redis_streams", "RedisStreams"),
    "jetstream": ("bench.peers.jetstream", "JetStream"),
    "rabbitmq": ("bench.peers.rabbitmq", "RabbitMQ"),
    "rocketmq5-proxy": ("bench.peers.rocketmq5", "RocketMQ5"),
    "kafka-gateway": ("bench.peers.kafka_gateway", "KafkaGateway"),
}
ALIASES = {"quiver": ["quiver-async", "quiver-sync"], "nats": ["jetstream"], "rabbit": ["rabbitmq"],
           "raw": ["ceilings", "floor"], "peers": ["redis", "jetstream", "rabbitmq"],
           "proxy": ["rocketmq5-proxy"], "rocketmq5": ["rocketmq5-proxy"],
           "kafka": ["kafka-gateway"]}
OPT_IN = {"quiver-auth", "quiver-trace"}  # only by name or with --auth / --trace
PACKAGES = {"redis": "redis-server", "jetstream": "nats-server", "rabbitmq": "rabbitmq-server"}


def resolve(only: str | None) -> list[str]:
    if not only:
        return [n for n in SYSTEMS if n not in OPT_IN]
    picked = set()
    for word in (w.strip() for w in only.split(",") if w.strip()):
        names = ALIASES.get(word, [word])
        for n in names:
            if n not in SYSTEMS:
                raise SystemExit(f"unknown system {word!r}; known: {', '.join([*SYSTEMS, *ALIASES])}")
        picked.update(names)
    return [n for n in SYSTEMS if n in picked]


def client_module(name: str):
    return importlib.import_module(SYSTEMS[name][0])


def system_class(name: str):
    mod, cls = SYSTEMS[name]
    return getattr(importlib.import_module(mod), cls)
