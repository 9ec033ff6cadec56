"""Read a Prometheus collector (or a /metrics text) the way a scraper does, for tests."""

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families


def parse(text: str) -> dict:
    """sample name -> [(labels, value)] of a /metrics text."""
    out: dict = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def samples(collector) -> dict:
    """`collector` rendered in the text format and parsed back (both must work)."""
    registry = CollectorRegistry()
    registry.register(collector)
    return parse(generate_latest(registry).decode())


def value(samples: dict, name: str, **labels) -> float | None:
    """The first sample `name` whose labels include `labels` (values compared as strings)."""
    for have, v in samples.get(name, []):
        if all(have.get(k) == str(want) for k, want in labels.items()):
            return v
    return None
