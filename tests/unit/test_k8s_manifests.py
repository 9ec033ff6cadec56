"""deploy/k8s: every manifest valid against the schemas of the Kubernetes version it targets
(kubernetes-validate, strict: an unknown field fails too), and the validation able to fail."""

import copy
import pathlib

import pytest
import yaml

from quiver.tools import deploy_k8s

kv = pytest.importorskip("kubernetes_validate", reason="the test extra installs kubernetes-validate")

K8S = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "k8s"
NOT_CORE = {"kustomization.yaml", "podmonitor.yaml"}   # kustomize's file, a Prometheus Operator CRD


def _docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def _all() -> list[tuple[str, dict]]:
    return [(p.name, d) for p in sorted(K8S.glob("*.yaml")) if p.name not in NOT_CORE for d in _docs(p.name)]


def _validate(doc: dict) -> None:
    kv.validate(doc, deploy_k8s.KUBERNETES_VERSION, strict=True)


def test_every_manifest_validates():
    docs = _all()
    kinds = {d["kind"] for _, d in docs}
    assert {"StatefulSet", "Deployment", "Service", "PodDisruptionBudget", "ConfigMap"} <= kinds
    for name, doc in docs:
        try:
            _validate(doc)
        except kv.ValidationError as exc:
            pytest.fail(f"{name} {doc['kind']}/{doc['metadata']['name']}: {exc}")


def test_a_broken_manifest_fails():
    sts = next(d for _, d in _all() if d["kind"] == "StatefulSet")
    for breaks in (lambda d: d["spec"].__setitem__("replicas", "three"),            # wrong type
                   lambda d: d["spec"]["template"]["spec"]["containers"][0]["ports"][0].__setitem__("containerPort", "ping"),
                   lambda d: d["spec"]["template"]["spec"]["containers"][0].__setitem__("probe", {}),  # unknown
                   lambda d: d["spec"].pop("selector")):                            # required
        broken = copy.deepcopy(sts)
        breaks(broken)
        with pytest.raises(kv.ValidationError):
            _validate(broken)


def test_stateful_parts_and_budgets():
    by_kind = {}
    for _, d in _all():
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    sts = by_kind["StatefulSet"]
    assert set(sts) == {"quiver-namesrv", "quiver-broker", "quiver-scheduler"}
    for name, s in sts.items():
        assert s["spec"]["podManagementPolicy"] and s["spec"]["volumeClaimTemplates"]
        assert by_kind["Service"][s["spec"]["serviceName"]]["spec"]["clusterIP"] == "None"   # headless
    assert by_kind["PodDisruptionBudget"]["quiver-namesrv"]["spec"]["minAvailable"] == 2   # Raft majority of 3
    assert by_kind["PodDisruptionBudget"]["quiver-broker"]["spec"]["maxUnavailable"] == 1
    ns_env = {e["name"]: e.get("value") for e in sts["quiver-namesrv"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert ns_env["QUIVER_CONTROLLER_PEERS"].count("quiver-namesrv-") == 3
    for d in [*sts.values(), *by_kind["Deployment"].values()]:
        c = d["spec"]["template"]["spec"]["containers"][0]
        assert "quiver" in c["readinessProbe"]["exec"]["command"] and c["livenessProbe"]["tcpSocket"]
        assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
        assert not any("KEY" in e["name"] and "value" in e and "/" not in e["value"] for e in c["env"])
        assert d["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"]


def test_kustomization_and_pod_monitor():
    kust = _docs("kustomization.yaml")[0]
    listed = set(kust["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - NOT_CORE - {"kafka.yaml"}
    mon = _docs("podmonitor.yaml")[0]
    with pytest.raises(kv.SchemaNotFoundError):   # a CRD: no core schema; checked by hand below
        _validate(mon)
    assert mon["spec"]["selector"]["matchLabels"] == deploy_k8s.PART_OF
    for _, d in _all():
        if d["kind"] in ("StatefulSet", "Deployment"):
            ports = d["spec"]["template"]["spec"]["containers"][0]["ports"]
            assert "metrics" in {p["name"] for p in ports}
