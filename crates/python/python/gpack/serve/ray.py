"""gpack on Ray Serve: replicas of a :class:`gpack.Model` behind the OpenAI chat route.

Install with ``pip install 'gpack[ray]'``. One command starts a local Ray
instance and serves a model on http://127.0.0.1:8000 (Ray's usage statistics
off unless RAY_USAGE_STATS_ENABLED says otherwise; everything bound to
127.0.0.1)::

    RAY_USAGE_STATS_ENABLED=0 python -m gpack.serve.ray smollm2.gpack --replicas 2

Autoscaling instead of a fixed count: ``--min-replicas 1 --max-replicas 4
--target-ongoing-requests 1``. On a running cluster, with Ray's own CLI
(arguments as ``key=value``, see :func:`build`)::

    RAY_USAGE_STATS_ENABLED=0 serve run gpack.serve.ray:build model=/models/smollm2.gpack num_replicas=2

Routes: ``POST /v1/chat/completions`` (OpenAI's request and response; with
``"stream": true`` server-sent ``chat.completion.chunk`` events, ``data:
[DONE]`` last) and ``GET /v1/models``. Each replica loads the model once and
runs one generation at a time on ``cpus`` threads, the Ray CPUs it reserves;
it takes ``max_ongoing_requests`` (2) at once, Ray Serve queues the rest and
scales the replicas. Every response names the replica and Ray node that answered
(headers ``x-gpack-replica``, ``x-gpack-node``). Request errors are
OpenAI-style ``{"error": {...}}`` bodies with status 400.

For one machine, ``gpack serve`` is the faster server: it decodes several
sequences in one batch, and has every route, metrics and probes.
"""

import argparse
import asyncio
import json
import os
import threading
from pathlib import Path
from typing import Any, Dict, Optional

if __name__ == "__main__":
    # `python -m gpack.serve.ray`: a local Ray instance, read by Ray when it
    # is imported (below), so set first; a value in the environment wins.
    # No usage statistics sent to Ray's makers:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Ray's own address resolves to 127.0.0.1 (as on macOS), so its
    # processes listen on loopback rather than the outward interface:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import ray  # noqa: E402
from ray import serve  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, Response, StreamingResponse  # noqa: E402

import gpack  # noqa: E402

__all__ = ["GpackChat", "app", "build", "build_options", "main"]

# Request fields passed on to Model.create_chat_completion under OpenAI's names.
_PASSED = ("max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop",
           "stream_options", "presence_penalty", "frequency_penalty", "response_format",
           "logprobs", "top_logprobs")
# Fields that would change the answer but that this route does not implement:
# refused rather than ignored (gpack serve has them).
_REFUSED = ("tools", "tool_choice", "functions", "function_call", "grammar", "logit_bias")


def _error(message: str, param: Optional[str] = None, status: int = 400,
           kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": None}},
                        status_code=status)


@serve.deployment(name="gpack", max_ongoing_requests=2, ray_actor_options={"num_cpus": 1})
class GpackChat:
    """One replica: a :class:`gpack.Model` and the routes in front of it."""

    def __init__(self, model: str, *, name: Optional[str] = None, threads: int = 1,
                 n_ctx: int = 2048, verify: str = "background"):
        self._model = gpack.Model(model, n_ctx=n_ctx, threads=threads, verify=verify)
        self._name = name or Path(model).stem
        # One generation at a time: the replica's threads are all the model's.
        self._lock = threading.Lock()
        self._headers = {
            "x-gpack-replica": serve.get_replica_context().replica_id.unique_id,
            "x-gpack-node": ray.get_runtime_context().get_node_id(),
        }

    async def __call__(self, request: Request) -> Response:
        path = request.url.path
        root = request.scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):]
        path = "/" + path.strip("/")
        if path == "/v1/chat/completions":
            if request.method != "POST":
                return _error(f"{request.method} {path}: use POST", status=405)
            r = await self._chat(request)
        elif path == "/v1/models" and request.method == "GET":
            r = JSONResponse({"object": "list", "data": [
                {"id": self._name, "object": "model", "created": 0, "owned_by": "gpack"}]})
        else:
            r = _error(f"no route {request.method} {path} (POST /v1/chat/completions, GET /v1/models)",
                       status=404, kind="not_found_error")
        r.headers.update(self._headers)
        return r

    async def _chat(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError as e:
            return _error(f"the request body is not JSON: {e}")
        if not isinstance(body, dict):
            return _error("the request body must be a JSON object")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error("messages: expected a non-empty list of messages", "messages")
        for k in _REFUSED:
            if body.get(k) is not None:
                return _error(f"{k}: not supported by gpack.serve.ray (gpack serve supports it)", k)
        if body.get("n", 1) != 1:
            return _error("n: only 1 choice per request here", "n")
        kw: Dict[str, Any] = {k: body[k] for k in _PASSED if body.get(k) is not None}
        if "max_tokens" not in kw and body.get("max_completion_tokens") is not None:
            kw["max_tokens"] = body["max_completion_tokens"]
        if body.get("stream"):
            return await self._stream(messages, kw)

        def work():
            with self._lock:
                return self._model.create_chat_completion(messages, **kw)

        try:
            out = await asyncio.to_thread(work)
        except (ValueError, TypeError) as e:
            return _error(str(e))
        except gpack.GpackError as e:
            return _error(str(e), status=503, kind="server_error")
        out["model"] = self._name
        return JSONResponse(out)

    async def _stream(self, messages, kw) -> Response:
        # The lock is taken before the stream starts generating and held
        # until it ends (or the client goes away and the iterator is closed).
        await asyncio.to_thread(self._lock.acquire)
        try:
            chunks = self._model.create_chat_completion(messages, stream=True, **kw)
        except (ValueError, TypeError) as e:
            self._lock.release()
            return _error(str(e))
        except BaseException:
            self._lock.release()
            raise

        def events():
            try:
                for c in chunks:
                    c["model"] = self._name
                    yield f"data: {json.dumps(c)}\n\n"
            except gpack.GpackError as e:
                err = {"message": str(e), "type": "server_error", "param": None, "code": None}
                yield f"data: {json.dumps({'error': err})}\n\n"
            finally:
                self._lock.release()
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")


def app(model: str, *, name: Optional[str] = None, num_replicas: int = 1,
        autoscaling_config: Optional[Dict[str, Any]] = None, cpus: int = 1, n_ctx: int = 2048,
        max_ongoing_requests: int = 2, verify: str = "background",
        ray_actor_options: Optional[Dict[str, Any]] = None) -> "serve.Application":
    """The Ray Serve application serving ``model`` (a .gpack, .gguf or HF directory path
    that every node can read).

    ``num_replicas`` fixed replicas, or ``autoscaling_config`` (Ray Serve's:
    ``{"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 1}``)
    to scale on the requests in flight. Each replica reserves ``cpus`` Ray
    CPUs and runs the model on that many threads, one generation at a time;
    ``max_ongoing_requests`` (2: one running, one waiting) bounds what a
    replica takes before Ray Serve routes to another (it prefers the
    replicas on the node that received the request, so a larger bound
    piles work on those). Start it with ``serve.run(app(...))``.
    """
    if cpus < 1:
        raise ValueError(f"cpus must be at least 1, got {cpus}")
    opts: Dict[str, Any] = {"max_ongoing_requests": max_ongoing_requests,
                            "ray_actor_options": {"num_cpus": cpus, **(ray_actor_options or {})}}
    if autoscaling_config is not None:
        opts["autoscaling_config"] = autoscaling_config
    else:
        opts["num_replicas"] = num_replicas
    return GpackChat.options(**opts).bind(model, name=name, threads=cpus, n_ctx=n_ctx, verify=verify)


def build_options(args: Dict[str, str]) -> Dict[str, Any]:
    """The keyword arguments of :func:`app` that ``key=value`` strings ask for (see :func:`build`)."""
    args = dict(args)
    known = {"model", "name", "num_replicas", "cpus", "n_ctx", "max_ongoing_requests", "verify",
             "min_replicas", "max_replicas", "target_ongoing_requests"}
    unknown = sorted(set(args) - known)
    if unknown:
        raise ValueError(f"unknown argument(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    if "model" not in args:
        raise ValueError("model=PATH is required")
    auto = {k: float(args.pop(k)) if k == "target_ongoing_requests" else int(args.pop(k))
            for k in ("min_replicas", "max_replicas", "target_ongoing_requests") if k in args}
    ints = {k: int(args.pop(k)) for k in ("num_replicas", "cpus", "n_ctx", "max_ongoing_requests") if k in args}
    if auto and "num_replicas" in ints:
        raise ValueError("num_replicas and autoscaling (min_replicas/max_replicas) exclude each other")
    if auto:
        ints["autoscaling_config"] = auto
    return {**args, **ints}


def build(args: Dict[str, str]) -> "serve.Application":
    """The application builder of ``serve run gpack.serve.ray:build key=value ...``.

    Keys: ``model`` (required), ``name``, ``num_replicas``, ``cpus``,
    ``n_ctx``, ``max_ongoing_requests``, ``verify``, and for autoscaling
    ``min_replicas`` / ``max_replicas`` / ``target_ongoing_requests``.
    """
    return app(**build_options(args))


def main(argv=None) -> int:
    """``python -m gpack.serve.ray MODEL``: a local Ray instance serving MODEL until Ctrl-C.

    Run as that command, usage statistics are off and Ray's processes listen
    on 127.0.0.1 unless the environment says otherwise (see the top of this
    module); Ray Serve's replicas still open their internal gRPC port on
    every interface (Ray 2.60 hard-codes it).
    """
    p = argparse.ArgumentParser(
        prog="python -m gpack.serve.ray",
        description="Serve a gpack model with Ray Serve: POST /v1/chat/completions, GET /v1/models. "
                    "Starts a local Ray instance on 127.0.0.1 (on a running cluster use "
                    "`serve run gpack.serve.ray:build model=PATH`).",
        epilog="Example: RAY_USAGE_STATS_ENABLED=0 python -m gpack.serve.ray smollm2.gpack --replicas 2")
    p.add_argument("model", help="the model file (.gpack, .gguf or a HF directory) every node can read")
    p.add_argument("--replicas", type=int, default=1, help="fixed number of replicas (default 1)")
    p.add_argument("--min-replicas", type=int, help="autoscaling: fewest replicas")
    p.add_argument("--max-replicas", type=int, help="autoscaling: most replicas (turns autoscaling on)")
    p.add_argument("--target-ongoing-requests", type=float, default=1.0,
                   help="autoscaling: requests in flight per replica to aim at (default 1)")
    p.add_argument("--cpus", type=int, default=1, help="Ray CPUs (= model threads) per replica (default 1)")
    p.add_argument("--ctx", type=int, default=2048, help="context per request in tokens (default 2048)")
    p.add_argument("--name", help="model name the API reports (default: the file name's stem)")
    p.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
    a = p.parse_args(argv)
    auto = None
    if a.max_replicas is not None:
        auto = {"min_replicas": a.min_replicas if a.min_replicas is not None else 1,
                "max_replicas": a.max_replicas, "target_ongoing_requests": a.target_ongoing_requests}
    elif a.min_replicas is not None:
        p.error("--min-replicas needs --max-replicas")
    application = app(str(Path(a.model).resolve()), name=a.name, num_replicas=a.replicas,
                      autoscaling_config=auto, cpus=a.cpus, n_ctx=a.ctx)
    ray.init(include_dashboard=False, _node_ip_address="127.0.0.1")
    serve.start(proxy_location="HeadOnly", http_options={"host": a.host, "port": a.port})
    serve.run(application, name="gpack", route_prefix="/")
    print(f"gpack.serve.ray: serving {a.model} on http://{a.host}:{a.port}/v1/chat/completions (Ctrl-C stops)",
          flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        serve.shutdown()
        ray.shutdown()
    return 0


if __name__ == "__main__":
    # Run from the package's own module, not __main__, so that Ray pickles
    # the deployment by reference (every node imports gpack.serve.ray).
    from gpack.serve.ray import main as _main

    raise SystemExit(_main())
