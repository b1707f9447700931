"""gpack.serve.ray on a real two-node Ray cluster (both nodes on 127.0.0.1):
two replicas, one per node; greedy chat answers over HTTP equal `gpack run
--chat`'s, streamed or not; bad requests get OpenAI-style errors. The test
starts the cluster and stops it itself.
"""

import os

# Before Ray is imported or started: no usage statistics leave this machine.
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
# Everything on 127.0.0.1. Ray otherwise takes a node's address from the
# interface that routes outward and rewrites 127.0.0.1 in the address a
# driver connects to into it, while a node started with node_ip_address
# 127.0.0.1 listens on loopback only: the driver could not reach its own
# cluster. With this variable off, Ray resolves its own address to
# 127.0.0.1 everywhere (its behaviour on macOS and Windows).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

import json  # noqa: E402
import socket  # noqa: E402
import threading  # noqa: E402

import pytest  # noqa: E402
import ray  # noqa: E402
import requests  # noqa: E402
from ray import serve  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import gpack.serve.ray as gray  # noqa: E402
from conftest import run_cli  # noqa: E402

N = 24
QUESTIONS = ["What is 2+2?", "Name a color.", "Write a haiku about the sea."]
LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def cli_chat(model, q):
    out = run_cli("run", model, "-p", q, "-n", N, "--temp", "0", "--chat").stdout
    assert out.endswith("\n")
    return out[:-1]


@pytest.fixture(scope="module")
def url(smol_gpack):
    """A head and one more node (1 CPU each), Serve with two 1-CPU replicas."""
    node = {"num_cpus": 1, "node_ip_address": LOOPBACK, "object_store_memory": 100 << 20}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    try:
        cluster.add_node(**node)
        ray.init(address=cluster.address, _node_ip_address=LOOPBACK)
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        port = free_port()
        serve.start(proxy_location="HeadOnly", http_options={"host": LOOPBACK, "port": port})
        serve.run(gray.app(str(smol_gpack), name="smollm2", num_replicas=2, cpus=1), name="gpack",
                  route_prefix="/")
        yield f"http://{LOOPBACK}:{port}"
    finally:
        try:
            if ray.is_initialized():
                serve.shutdown()
        finally:
            ray.shutdown()
            cluster.shutdown()


def chat(url, q, **extra):
    body = {"model": "smollm2", "messages": [{"role": "user", "content": q}],
            "temperature": 0, "max_tokens": N, **extra}
    return requests.post(f"{url}/v1/chat/completions", json=body, timeout=300)


def test_two_replicas_on_two_nodes_answer_as_gpack_run(url, smol_gpack):
    want = {q: cli_chat(smol_gpack, q) for q in QUESTIONS}
    results, errors = [], []

    def ask(q):
        try:
            results.append((q, chat(url, q)))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    # Each question twice at once: both replicas get work.
    threads = [threading.Thread(target=ask, args=(q,)) for q in QUESTIONS for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == 2 * len(QUESTIONS)
    replicas, nodes = set(), set()
    for q, r in results:
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["object"] == "chat.completion" and body["model"] == "smollm2"
        (c,) = body["choices"]
        assert c["message"] == {"role": "assistant", "content": want[q]}, q
        assert c["finish_reason"] in ("stop", "length")
        u = body["usage"]
        assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] > 0
        replicas.add(r.headers["x-gpack-replica"])
        nodes.add(r.headers["x-gpack-node"])
    assert len(replicas) == 2 and len(nodes) == 2, (replicas, nodes)


def test_stream_equals_the_whole_answer(url, smol_gpack):
    q = QUESTIONS[1]
    r = requests.post(f"{url}/v1/chat/completions", timeout=300, stream=True, json={
        "messages": [{"role": "user", "content": q}], "temperature": 0, "max_tokens": N, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [line[len("data: "):] for line in r.iter_lines(decode_unicode=True) if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == cli_chat(smol_gpack, q)
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_models_and_errors(url):
    r = requests.get(f"{url}/v1/models", timeout=60)
    assert r.status_code == 200 and [m["id"] for m in r.json()["data"]] == ["smollm2"]
    bad = [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "user", "content": "Hi"}], "n": 2}, "n"),
        ({"messages": [{"role": "user", "content": "Hi"}], "tools": [{"type": "function"}]}, "tools"),
        ({"messages": [{"role": "user", "content": "Hi"}], "temperature": -1}, None),
    ]
    for body, param in bad:
        r = requests.post(f"{url}/v1/chat/completions", json=body, timeout=60)
        assert r.status_code == 400, (body, r.status_code, r.text)
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and err["message"], err
        if param:
            assert err["param"] == param and param in err["message"], err
    r = requests.post(f"{url}/v1/chat/completions", data=b"{not json", timeout=60)
    assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]
    r = requests.get(f"{url}/v1/chat/completions", timeout=60)
    assert r.status_code == 405
    r = requests.get(f"{url}/nope", timeout=60)
    assert r.status_code == 404 and "/v1/chat/completions" in r.json()["error"]["message"]


def test_build_arguments():
    """`serve run gpack.serve.ray:build k=v`: typed options, autoscaling, refusals."""
    assert gray.build_options({"model": "m.gpack", "min_replicas": "1", "max_replicas": "4",
                               "target_ongoing_requests": "2", "cpus": "2"}) == {
        "model": "m.gpack", "cpus": 2,
        "autoscaling_config": {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 2.0}}
    assert gray.build_options({"model": "m.gpack", "num_replicas": "3", "name": "x"}) == {
        "model": "m.gpack", "num_replicas": 3, "name": "x"}
    with pytest.raises(ValueError, match="exclude"):
        gray.build_options({"model": "m.gpack", "num_replicas": "2", "max_replicas": "4"})
    with pytest.raises(ValueError, match="unknown argument"):
        gray.build_options({"model": "m.gpack", "replicas": "2"})
    with pytest.raises(ValueError, match="model=PATH"):
        gray.build_options({})
    with pytest.raises(ValueError, match="cpus"):
        gray.app("m.gpack", cpus=0)


def test_ray_is_an_optional_extra():
    """The base package neither imports nor requires Ray; gpack[ray] does."""
    import importlib.metadata
    import subprocess
    import sys

    code = "import sys, gpack, gpack.serve; assert 'ray' not in sys.modules, 'gpack imported ray'"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    reqs = importlib.metadata.requires("gpack")
    on_ray = [q for q in reqs if q.startswith("ray")]
    assert on_ray and all("extra == 'ray'" in q or 'extra == "ray"' in q for q in on_ray), reqs
