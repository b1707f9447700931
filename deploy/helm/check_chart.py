"""Checks of the chart deploy/helm/gpack, run by scripts/test-helm.sh.

Each case renders the chart with `helm template` (the real helm binary) for
one set of values and asserts what the manifests say: the kinds rendered,
the `gpack serve` / `gpack pull` arguments, probes, volumes, the Secret
reference. Every Kubernetes kind is validated strictly (no unknown field)
against the JSON schemas of Kubernetes 1.35 and 1.36 that kubernetes-validate
ships (1.34 too for the initContainer path, the one for clusters without
image volumes); a custom resource (ServiceMonitor, PodMonitor, InferencePool,
InferenceObjective) appears only behind its flag, has no schema there, and is
checked field by field here. `helm lint` runs on every case's values. Values
that contradict each other must fail the render with a message naming them.

Usage: python check_chart.py HELM   (python: one with kubernetes-validate and
PyYAML, as scripts/helm.sh installs). Prints "N passed, N failed" last.
"""

import json
import math
import subprocess
import sys
import traceback
from pathlib import Path

import kubernetes_validate
import yaml

CHART = Path(__file__).resolve().parent / "gpack"
HELM = sys.argv[1] if len(sys.argv) > 1 else "helm"
KUBE = ["1.35.0", "1.36.0"]
CORE_KINDS = {"Deployment", "Service", "HorizontalPodAutoscaler"}
REF = "registry.example.com/models/smollm2:q4_1"  # values.yaml's placeholder


def helm(*args):
    return subprocess.run([HELM, *args], capture_output=True, text=True)


def set_args(sets):
    out = []
    for k, v in sets.items():
        # Typed as a values file would be: --set alone reads 12.5 as a string.
        if isinstance(v, str):
            out += ["--set-string", f"{k}={v}"]
        else:
            out += ["--set-json", f"{k}={json.dumps(v)}"]
    return out


def render(sets, kube="1.35.0"):
    r = helm("template", "t", str(CHART), "--kube-version", kube, *set_args(sets))
    assert r.returncode == 0, f"helm template {sets} failed: {r.stderr}"
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    r = helm("lint", str(CHART), "--strict", "--kube-version", kube, *set_args(sets))
    assert r.returncode == 0, f"helm lint {sets} failed: {r.stdout}{r.stderr}"
    return docs


def validate(docs, versions):
    """Each core kind strictly against each version's schema; returns the kinds seen."""
    for d in docs:
        if d["kind"] not in CORE_KINDS:
            continue
        for v in versions:
            try:
                kubernetes_validate.validate(d, v, strict=True)
            except kubernetes_validate.ValidationError as e:
                path = ".".join(map(str, e.path))
                raise AssertionError(f"{d['kind']} invalid against {v}: {path}: {e.message}") from None
    return sorted(d["kind"] for d in docs)


def one(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def pod(docs):
    return one(docs, "Deployment")["spec"]["template"]["spec"]


def server(docs):
    (c,) = pod(docs)["containers"]
    return c


def flag(args, name):
    """The value after `name` in args, or None when absent."""
    assert args.count(name) <= 1, f"{name} given twice: {args}"
    return args[args.index(name) + 1] if name in args else None


def check_probes(c):
    assert c["startupProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    s = c["startupProbe"]
    # The startup probe allows minutes of load and verification.
    assert s["periodSeconds"] * s["failureThreshold"] >= 300, s


def test_defaults_render_core_kinds_only():
    docs = render({})
    assert validate(docs, KUBE) == ["Deployment", "Service"]
    c = server(docs)
    a = c["args"]
    assert a[:2] == ["serve", "/models/model.gpack"], a
    assert flag(a, "--host") == "0.0.0.0" and flag(a, "--port") == "8080"
    assert flag(a, "--threads") == "2"  # resources.requests.cpu "2"
    assert flag(a, "--metrics-port") == "9090" and "--metrics-public" not in a
    assert flag(a, "--drain-grace") == "5" and flag(a, "--drain-timeout") == "30"
    check_probes(c)
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"http": 8080, "metrics": 9090}
    assert not any(e["name"] == "GPACK_API_KEY" for e in c.get("env", []))
    p = pod(docs)
    assert "initContainers" not in p
    assert p["terminationGracePeriodSeconds"] == 5 + 30 + 5
    vols = {v["name"]: v for v in p["volumes"]}
    assert vols["model"]["image"] == {"reference": REF, "pullPolicy": "IfNotPresent"}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["model"] == {"name": "model", "mountPath": "/models", "readOnly": True}
    svc = one(docs, "Service")
    assert {p["name"]: (p["port"], p["targetPort"]) for p in svc["spec"]["ports"]} == {
        "http": (80, "http"), "metrics": (9090, "metrics")}
    assert svc["spec"]["selector"].items() <= p_labels(docs).items()


def p_labels(docs):
    return one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]


def test_init_container_pull_with_secrets():
    sets = {
        "model.source": "initContainer",
        "model.pull.registrySecret": "regcred",
        "model.pull.sizeLimit": "2Gi",
        "apiKey.existingSecret": "gpack-key",
        "resources.requests.cpu": "1500m",
        "serve.drainTimeout": 12.5,
    }
    # Also on 1.34: the path for clusters without image volumes.
    for kube in ["1.34.0", *KUBE]:
        docs = render(sets, kube)
        assert validate(docs, [kube]) == ["Deployment", "Service"]
    p = pod(docs)
    (init,) = p["initContainers"]
    assert init["args"] == ["pull", REF, "--output", "/models/model.gpack", "--jobs", "4",
                            "--docker-config", "/var/run/gpack/registry/.dockerconfigjson"]
    assert {m["mountPath"] for m in init["volumeMounts"]} == {"/models", "/tmp", "/var/run/gpack/registry"}
    vols = {v["name"]: v for v in p["volumes"]}
    assert vols["model"] == {"name": "model", "emptyDir": {"sizeLimit": "2Gi"}}
    assert vols["registry-auth"]["secret"]["secretName"] == "regcred"
    c = server(docs)
    assert flag(c["args"], "--threads") == "2"  # 1500m rounded up
    (key,) = [e for e in c["env"] if e["name"] == "GPACK_API_KEY"]
    assert key["valueFrom"] == {"secretKeyRef": {"name": "gpack-key", "key": "api-key"}}
    assert not any("gpack-key" in a for a in c["args"])  # the key never on the command line
    assert p["terminationGracePeriodSeconds"] == math.ceil(5 + 12.5) + 5
    check_probes(c)


def test_hpa_on_the_queue_gauge():
    sets = {"autoscaling.enabled": True, "metrics.port": 0, "metrics.public": True,
            "resources.requests.cpu": "500m"}
    docs = render(sets)
    assert validate(docs, KUBE) == ["Deployment", "HorizontalPodAutoscaler", "Service"]
    assert "replicas" not in one(docs, "Deployment")["spec"]  # the HPA owns it
    hpa = one(docs, "HorizontalPodAutoscaler")["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "t-gpack"}
    (m,) = hpa["metrics"]
    assert m["type"] == "Pods" and m["pods"]["metric"]["name"] == "vllm:num_requests_waiting"
    assert m["pods"]["target"] == {"type": "AverageValue", "averageValue": "2"}
    a = server(docs)["args"]
    assert flag(a, "--threads") == "1" and "--metrics-public" in a and "--metrics-port" not in a
    assert [p["name"] for p in one(docs, "Service")["spec"]["ports"]] == ["http"]


def test_threads_value_wins_and_whole_cpus_round_up():
    docs = render({"serve.threads": 3, "resources.requests.cpu": "8"})
    assert flag(server(docs)["args"], "--threads") == "3"
    docs = render({"resources.requests.cpu": 1.5})
    assert flag(server(docs)["args"], "--threads") == "2"
    docs = render({"resources.requests.cpu": None})
    validate(docs, KUBE)
    assert "--threads" not in server(docs)["args"]


def test_monitors_behind_flags():
    docs = render({"metrics.serviceMonitor.enabled": True, "metrics.podMonitor.enabled": True,
                   "metrics.serviceMonitor.labels.release": "prom"})
    assert validate(docs, KUBE) == ["Deployment", "PodMonitor", "Service", "ServiceMonitor"]
    sm, pm = one(docs, "ServiceMonitor"), one(docs, "PodMonitor")
    assert sm["apiVersion"] == pm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    assert pm["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    assert sm["spec"]["selector"]["matchLabels"].items() <= p_labels(docs).items()


def test_inference_pool_and_objective_behind_a_flag():
    docs = render({"inferenceExtension.enabled": True, "inferenceExtension.endpointPicker.service": "gpack-epp",
                   "inferenceExtension.objective.priority": 10})
    assert validate(docs, KUBE) == ["Deployment", "InferenceObjective", "InferencePool", "Service"]
    pool = one(docs, "InferencePool")
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    s = pool["spec"]
    assert s["targetPorts"] == [{"number": 8080}]
    assert s["selector"]["matchLabels"].items() <= p_labels(docs).items()
    assert s["endpointPickerRef"] == {"name": "gpack-epp", "port": {"number": 9002}, "failureMode": "FailClose"}
    obj = one(docs, "InferenceObjective")
    assert obj["apiVersion"] == "inference.networking.x-k8s.io/v1alpha2"
    assert obj["spec"] == {"priority": 10, "poolRef": {
        "group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool["metadata"]["name"]}}


def refused(sets, kube, needle):
    r = helm("template", "t", str(CHART), "--kube-version", kube, *set_args(sets))
    assert r.returncode != 0, f"{sets} on {kube} rendered; expected a refusal naming {needle!r}"
    # The template's messages name values as a.b, the schema's as /a/b.
    named = needle in r.stderr or "/" + needle.replace(".", "/") in r.stderr
    assert named, f"{sets}: the error does not name {needle!r}: {r.stderr}"


def test_contradicting_values_are_refused_by_name():
    refused({}, "1.34.0", "model.source=initContainer")
    refused({"model.source": "s3"}, "1.35.0", "model.source")
    refused({"resources.requests.cpu": "two"}, "1.35.0", "resources.requests.cpu")
    refused({"model.file": "../etc/x.gpack"}, "1.35.0", "model.file")
    refused({"metrics.port": 8080}, "1.35.0", "metrics.port")
    refused({"inferenceExtension.enabled": True}, "1.35.0", "inferenceExtension.endpointPicker.service")
    refused({"inferenceExtension.enabled": True, "inferenceExtension.endpointPicker.service": "epp",
             "apiKey.existingSecret": "k"}, "1.35.0", "metrics.public")
    refused({"metrics.serviceMonitor.enabled": True, "metrics.port": 0, "apiKey.existingSecret": "k"},
            "1.35.0", "metrics.public")
    # The schema (values.schema.json) names what is wrong too.
    refused({"serve.verify": "sometimes"}, "1.35.0", "verify")
    refused({"replicaCount": -1}, "1.35.0", "replicaCount")


def main():
    tests = [(n, f) for n, f in globals().items() if n.startswith("test_") and callable(f)]
    passed = failed = 0
    for name, f in tests:
        try:
            f()
            passed += 1
            print(f"ok   {name}")
        except Exception:  # noqa: BLE001 - report every failure, then fail the run
            failed += 1
            print(f"FAIL {name}\n{traceback.format_exc()}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
