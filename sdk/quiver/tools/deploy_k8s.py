"""deploy/k8s/*.yaml, plain manifests, from compose.yaml (see deploy_gen).

Name servers (with the controller), brokers (one failover group) and the scheduler are
StatefulSets: pod quiver-<name>-<n> is reached as quiver-<name>-<n>.quiver-<name> through a
headless Service and keeps its PersistentVolumeClaim. Filter, txn-checker, proxy and console
are Deployments that advertise their pod IP. Readiness runs `quiver ping` (a PING the service
loop answers, CURVE-authenticated); liveness only checks that the PING port accepts TCP, so a
loop slowed by load is not restarted.
"""

from pathlib import Path

from quiver.tools.deploy_gen import (NAMESRV, PARTS, PING_PORT_KEY, Part, dump, dump_all, entry, orchestrated,
                                     Mode, module, ping_command, port, secret_name)

SECRETS_DIR = "/etc/quiver/secrets"
IMAGE = "quiver:latest"
UID = 10001
KUBERNETES_VERSION = "1.33.0"   # the schemas tests/unit/test_k8s_manifests.py validates against
LABEL = "app.kubernetes.io/name"
PART_OF = {"app.kubernetes.io/part-of": "quiver"}
STORAGE = {"namesrv": "1Gi", "broker": "20Gi", "scheduler": "2Gi"}
REQUESTS = {"namesrv": ("100m", "256Mi"), "broker": ("500m", "1Gi")}
HEADER = """
Quiver on Kubernetes ({version}): kubectl apply -k deploy/k8s  (docs/deploy-kubernetes.md)
Generated from compose.yaml by `python -m quiver.tools.deploy_gen`; a unit test holds it to
that output and validates it against Kubernetes {version}'s schemas.
"""


def name(part: Part) -> str:
    return f"quiver-{part.name}"


def hosts(part: Part) -> list[str]:
    return [f"{name(part)}-{i}.{name(part)}" for i in range(part.replicas)]


def labels(part: Part) -> dict:
    return {LABEL: name(part), **PART_OF}


def field_env(var: str, path: str) -> dict:
    return {"name": var, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def container(part: Part, services: dict) -> dict:
    env = orchestrated(part, services, False, hosts, f"$(POD_NAME).{name(part)}")
    ping = port(env, PING_PORT_KEY)
    prelude = ""
    if part.name == "broker":   # ids from 1, like compose's failover members (pod ordinals start at 0)
        prelude = "export QUIVER_BROKER_ID=$((${POD_NAME##*-} + 1)) && "
    publish = [port(env, k) for k in part.publish]
    if part.advertises and "QUIVER_ADVERTISE" not in env:   # reached at its pod IP
        env["QUIVER_ADVERTISE"] = f"$(POD_IP):{ping}"
    metrics = port(env, "QUIVER_METRICS_LISTEN")
    cpu, mem = REQUESTS.get(part.name, ("100m", "128Mi"))
    mounts = [{"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True}]
    if part.stateful:
        mounts.append({"name": "data", "mountPath": "/data"})
    ports = [{"name": "ping", "containerPort": ping}, {"name": "metrics", "containerPort": metrics}]
    ports += [{"name": f"client-{i}" if i else "client", "containerPort": p} for i, p in enumerate(publish)]
    if part is NAMESRV:
        ports.append({"name": "raft", "containerPort": ping + 1})
    if "QUIVER_HA_LISTEN" in env:
        ports.append({"name": "ha", "containerPort": port(env, "QUIVER_HA_LISTEN")})
    return {
        "name": part.name,
        "image": IMAGE,
        "command": entry(part, module(services[part.base]), SECRETS_DIR, prelude=prelude),
        "env": [field_env("POD_NAME", "metadata.name"), field_env("POD_IP", "status.podIP"),
                *({"name": k, "value": v} for k, v in env.items())],
        "ports": ports,
        "volumeMounts": mounts,
        "resources": {"requests": {"cpu": cpu, "memory": mem}, "limits": {"memory": _double(mem)}},
        "readinessProbe": {"exec": {"command": ping_command(part, ping)},
                           "initialDelaySeconds": 5, "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"tcpSocket": {"port": "ping"}, "initialDelaySeconds": 30, "periodSeconds": 20,
                          "timeoutSeconds": 5, "failureThreshold": 6},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }


def _double(mem: str) -> str:
    return f"{int(mem[:-2]) * 2}{mem[-2:]}"


def pod_spec(part: Part, services: dict) -> dict:
    c = container(part, services)
    metrics = next(p["containerPort"] for p in c["ports"] if p["name"] == "metrics")
    secret = {"secretName": secret_name(part.key) if part.key else "quiver-auth", "defaultMode": Mode(0o400)}
    return {
        "metadata": {"labels": labels(part),
                     "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": str(metrics),
                                     "prometheus.io/path": "/metrics"}},
        "spec": {
            "securityContext": {"runAsUser": UID, "runAsGroup": UID, "fsGroup": UID, "runAsNonRoot": True},
            "terminationGracePeriodSeconds": 30,
            "containers": [c],
            "volumes": [{"name": "secrets", "secret": secret}],
        },
    }


def service(part: Part, services: dict, headless: bool) -> dict:
    c = container(part, services)
    spec = {"selector": labels(part),
            "ports": [{"name": p["name"], "port": p["containerPort"], "targetPort": p["name"]} for p in c["ports"]]}
    if headless:   # one DNS name per pod, there before it is ready (Raft peers find each other)
        spec.update(clusterIP="None", publishNotReadyAddresses=True)
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name(part), "labels": labels(part)},
            "spec": spec}


def stateful_set(part: Part, services: dict) -> dict:
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name(part), "labels": labels(part)},
        "spec": {
            "serviceName": name(part),
            "replicas": part.replicas,
            # a Raft quorum needs its peers up together; broker roles come from the controller, not the order
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "selector": {"matchLabels": labels(part)},
            "template": pod_spec(part, services),
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": STORAGE[part.name]}}}}],
        },
    }


def deployment(part: Part, services: dict) -> dict:
    # a host port or a volume of its own is not involved: the new pod starts before the old stops
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name(part), "labels": labels(part)},
        "spec": {"replicas": part.replicas, "selector": {"matchLabels": labels(part)},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
                 "template": pod_spec(part, services)},
    }


def disruption_budget(part: Part) -> dict:
    # name servers: a Raft majority; brokers: a group loses one member at a time, so its master or
    # an in-sync slave the controller promotes is always there
    limit = {"minAvailable": part.replicas // 2 + 1} if part is NAMESRV else {"maxUnavailable": 1}
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name(part), "labels": labels(part)},
            "spec": {**limit, "selector": {"matchLabels": labels(part)}}}


ALERTS = Path(__file__).resolve().parents[3] / "deploy" / "prometheus" / "alerts.yml"


def scrape_config() -> dict:
    """Prometheus's own scrape job for every Quiver pod (the annotations name the metrics port)."""
    job = {"job_name": "quiver-pods",   # the alert rules' service-down rule matches job=~"quiver-.*"
           "kubernetes_sd_configs": [{"role": "pod"}],
           "relabel_configs": [
               {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_part_of"], "regex": "quiver",
                "action": "keep"},
               {"source_labels": ["__address__", "__meta_kubernetes_pod_annotation_prometheus_io_port"],
                "regex": "([^:]+)(?::\\d+)?;(\\d+)", "replacement": "$1:$2", "target_label": "__address__"},
               {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"], "target_label": "service"},
               {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"}]}
    text = dump({"scrape_configs": [job]}, "")
    # the alert rules as shipped (deploy/prometheus/alerts.yml): mount the key and list it in rule_files
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "quiver-prometheus", "labels": PART_OF},
            "data": {"quiver-scrape.yml": text, "quiver-alerts.yml": ALERTS.read_text()}}


def pod_monitor() -> dict:
    """The same for the Prometheus Operator (a CRD: deploy/k8s/podmonitor.yaml, applied on its own)."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
            "metadata": {"name": "quiver", "labels": PART_OF},
            "spec": {"selector": {"matchLabels": PART_OF},
                     "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s"}]}}


def files(services: dict) -> dict[str, str]:
    header = HEADER.format(version=KUBERNETES_VERSION)
    out = {}
    for part in PARTS:
        if part.stateful:
            docs = [service(part, services, headless=True), stateful_set(part, services)]
            if part.replicas > 1:
                docs.append(disruption_budget(part))
        else:
            docs = [service(part, services, headless=False), deployment(part, services)]
        out[f"deploy/k8s/{part.name}.yaml"] = dump_all(docs, header)
    out["deploy/k8s/prometheus-scrape.yaml"] = dump_all([scrape_config()], header)
    out["deploy/k8s/podmonitor.yaml"] = dump_all([pod_monitor()], header + "Needs the Prometheus Operator's CRDs.\n")
    kustom = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
              "labels": [{"pairs": PART_OF}],
              "resources": [f"{p.name}.yaml" for p in PARTS if not p.addon] + ["prometheus-scrape.yaml"]}
    out["deploy/k8s/kustomization.yaml"] = dump(kustom, header + "The Kafka gateway (kafka.yaml) needs its "
                                                "clients' key first: docs/deploy-kubernetes.md.\n")
    return out
