"""Tests of `gpack serve` with the real `openai` Python client, over loopback.

Usage: python openai_client.py BASE_URL GROUP [API_KEY]
  GROUP: basic | concurrency | abuse | auth | structured | sampling | tools | tool_format
BASE_URL is like http://127.0.0.1:PORT (no /v1). The server must run
SmolLM2-135M-Instruct with --ctx 512 (the abuse group relies on it).

Prints one line per case ("ok NAME" / "FAIL NAME: why") and a closing
"N passed, M failed"; exits 1 if any case failed. Every network call has a
timeout and every loop a bound.
"""

import concurrent.futures as cf
import json
import socket
import sys
import threading
import time
import traceback
import urllib.parse

import http.client

import openai

BASE = sys.argv[1]
GROUP = sys.argv[2]
KEY = sys.argv[3] if len(sys.argv) > 3 else "none"
HOST, PORT = urllib.parse.urlparse(BASE).hostname, urllib.parse.urlparse(BASE).port
CTX = 512
# serve.rs starts the server of the abuse group with --parallel 4 --queue 16.
PARALLEL, QUEUE = 4, 16
TIMEOUT = 120

client = openai.OpenAI(base_url=BASE + "/v1", api_key=KEY, timeout=TIMEOUT, max_retries=0)
MODEL = "smollm2"

results = []


def case(fn):
    name = fn.__name__
    try:
        fn()
        results.append((name, None))
        print(f"ok {name}", flush=True)
    except Exception as e:  # noqa: BLE001 - report every failure, keep going
        results.append((name, e))
        print(f"FAIL {name}: {e!r}", flush=True)
        traceback.print_exc()
    return fn


def chat(content, **kw):
    return client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": content}], **kw
    )


def stream_chat(content, **kw):
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": content}], stream=True, **kw
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return chunks, text


class Resp:
    def __init__(self, status, headers, text):
        self.status_code, self.headers, self.text = status, headers, text

    def json(self):
        return json.loads(self.text)


def raw(method, path, body=None, headers=None, timeout=TIMEOUT):
    c = http.client.HTTPConnection(HOST, PORT, timeout=timeout)
    try:
        if isinstance(body, str):
            body = body.encode()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, data.decode(errors="replace"))
    finally:
        c.close()


def assert_error(r, status, param=None):
    assert r.status_code == status, (r.status_code, r.text[:300])
    err = r.json()["error"]
    assert isinstance(err["message"], str) and err["message"], err
    assert "type" in err and "code" in err and "param" in err, err
    if param is not None:
        assert err["param"] == param, err
    return err


def metric(name):
    text = raw("GET", "/metrics").text
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"metric {name} missing")


# ---------------------------------------------------------------- basic


def basic():
    @case
    def models_list():
        ms = client.models.list()
        assert len(ms.data) == 1 and ms.data[0].id, ms

    @case
    def health():
        r = raw("GET", "/health")
        assert r.status_code == 200 and r.json()["status"] == "ok", r.text

    @case
    def chat_non_streaming():
        r = chat("What is the capital of France?", max_tokens=16, temperature=0)
        assert r.object == "chat.completion", r
        c = r.choices[0]
        assert c.message.role == "assistant" and c.message.content, r
        assert c.finish_reason in ("stop", "length"), r
        u = r.usage
        assert u.prompt_tokens > 5 and 0 < u.completion_tokens <= 16, u
        assert u.total_tokens == u.prompt_tokens + u.completion_tokens, u

    @case
    def chat_streaming_equals_non_streaming():
        q = "Name three colors."
        full = chat(q, max_tokens=20, temperature=0).choices[0].message.content
        chunks, text = stream_chat(q, max_tokens=20, temperature=0)
        assert chunks[0].object == "chat.completion.chunk", chunks[0]
        assert chunks[0].choices[0].delta.role == "assistant", chunks[0]
        assert chunks[-1].choices[0].finish_reason in ("stop", "length"), chunks[-1]
        assert all(c.choices[0].finish_reason is None for c in chunks[:-1])
        assert len({c.id for c in chunks}) == 1
        assert text == full, (text, full)

    @case
    def chat_streaming_usage():
        s = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(s)
        assert chunks[-1].usage is not None and chunks[-1].choices == [], chunks[-1]
        assert chunks[-1].usage.completion_tokens <= 8

    @case
    def sse_wire_format_ends_with_done():
        body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                           "temperature": 0, "stream": True})
        r = raw("POST", "/v1/chat/completions", body)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [e for e in r.text.split("\n\n") if e]
        assert all(e.startswith("data: ") for e in events), events
        assert events[-1] == "data: [DONE]", events[-1]
        for e in events[:-1]:
            json.loads(e[len("data: "):])

    @case
    def completions():
        r = client.completions.create(
            model=MODEL, prompt="The capital of France is", max_tokens=8, temperature=0
        )
        assert r.object == "text_completion", r
        assert "Paris" in r.choices[0].text, r.choices[0].text
        assert r.usage.completion_tokens <= 8

    @case
    def completions_streaming():
        s = client.completions.create(
            model=MODEL, prompt="The capital of France is", max_tokens=8, temperature=0, stream=True
        )
        text = "".join(c.choices[0].text for c in s)
        assert "Paris" in text, text

    @case
    def stop_sequence():
        r = client.completions.create(
            model=MODEL, prompt="The capital of France is", max_tokens=16, temperature=0, stop=["\n"]
        )
        c = r.choices[0]
        assert c.finish_reason == "stop", c
        assert "\n" not in c.text and "Paris" in c.text, c.text
        # The same stop streamed: the stop string is never sent.
        s = client.completions.create(
            model=MODEL, prompt="The capital of France is", max_tokens=16, temperature=0,
            stop=[" Paris"], stream=True,
        )
        text = "".join(ch.choices[0].text for ch in s)
        assert "Paris" not in text, text

    @case
    def seed_reproducibility():
        kw = dict(max_tokens=24, temperature=1.0, top_p=0.95)
        a = chat("Tell me a story.", seed=1234, **kw).choices[0].message.content
        b = chat("Tell me a story.", seed=1234, **kw).choices[0].message.content
        assert a == b, (a, b)
        others = {chat("Tell me a story.", seed=s, **kw).choices[0].message.content for s in (1, 2, 3)}
        assert len(others | {a}) > 1, "different seeds all gave the same text"

    @case
    def invalid_requests():
        for kw, param in [({"n": 9}, "n"), ({"temperature": 5}, "temperature"),
                          ({"top_p": 0}, "top_p"), ({"max_tokens": 0}, "max_tokens")]:
            try:
                chat("Hi", **kw)
            except openai.BadRequestError as e:
                assert e.status_code == 400
                assert e.body["param"] == param, e.body
            else:
                raise AssertionError(f"{kw} was accepted")
        try:
            client.chat.completions.create(model=MODEL, messages=[])
        except openai.BadRequestError as e:
            assert e.status_code == 400
        else:
            raise AssertionError("empty messages accepted")

    @case
    def metrics_prometheus():
        text = raw("GET", "/metrics").text
        for name in ["gpack_requests_total", "gpack_generated_tokens_total", "gpack_queue_depth",
                     "gpack_time_to_first_token_seconds_bucket",
                     "gpack_decode_tokens_per_second_bucket"]:
            assert name in text, name
        assert metric("gpack_generated_tokens_total") > 0


# ---------------------------------------------------------------- concurrency


PROMPTS = [
    "What is the capital of France?", "Write a haiku about the sea.", "What is 2+2?",
    "Name a famous painter.", "How do birds fly?", "Give me a synonym for happy.",
    "What color is the sky?", "Say hello in Spanish.", "What is a prime number?",
    "Describe a cat in one sentence.", "Why is the ocean salty?", "Name a planet.",
    "What is photosynthesis?", "Recommend a book.", "What is the speed of light?",
    "Tell me a fun fact.",
]


def concurrency():
    @case
    def sixteen_concurrent_streams_equal_alone():
        kw = dict(max_tokens=24, temperature=0)
        alone = [chat(p, **kw).choices[0].message.content for p in PROMPTS]
        # The openai client's response types are pydantic models built on first use
        # (defer_build), and that build is not thread-safe: a first streamed chunk
        # parsed by 16 threads at once can fail inside pydantic. Stream once alone
        # so every chunk type is built before the threads start.
        stream_chat(PROMPTS[0], **kw)
        barrier = threading.Barrier(len(PROMPTS), timeout=60)

        def one(p):
            barrier.wait()
            return stream_chat(p, **kw)[1]

        with cf.ThreadPoolExecutor(len(PROMPTS)) as ex:
            together = list(ex.map(one, PROMPTS, timeout=600))
        bad = [(p, a, t) for p, a, t in zip(PROMPTS, alone, together) if a != t]
        assert not bad, bad
        assert len(set(alone)) > 8, "outputs are not independent"


# ---------------------------------------------------------------- abuse


def raw_socket(data, read=True, timeout=30):
    s = socket.create_connection((HOST, PORT), timeout=timeout)
    try:
        s.sendall(data)
        if not read:
            return b""
        out = b""
        for _ in range(100000):
            b = s.recv(65536)
            if not b:
                break
            out += b
        return out
    finally:
        s.close()


def http_req(path, body, extra=""):
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n{extra}\r\n").encode() + body


def abuse():
    @case
    def malformed_json():
        r = raw("POST", "/v1/chat/completions", b'{"messages": [')
        assert_error(r, 400)
        r = raw("POST", "/v1/completions", b"\xff\xfe not json")
        assert_error(r, 400)
        r = raw("POST", "/v1/completions", b"[1, 2]")
        assert_error(r, 400)

    @case
    def wrong_types():
        for body in [
            {"messages": "hello"},
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "ten"},
            {"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"},
            {"messages": [{"role": "user", "content": 42}]},
            {"messages": [{"content": "no role"}]},
            {"messages": [{"role": "user", "content": "hi"}], "stop": 7},
            {"messages": [{"role": "user", "content": "hi"}], "stream": "yes"},
        ]:
            assert_error(raw("POST", "/v1/chat/completions", json.dumps(body)), 400)
        assert_error(raw("POST", "/v1/completions", json.dumps({"prompt": {"a": 1}})), 400)
        assert_error(raw("POST", "/v1/completions", json.dumps({"prompt": [999999999]})), 400)

    @case
    def huge_max_tokens():
        r = chat("Say OK.", max_tokens=10**12, temperature=0)
        u = r.usage
        assert u.prompt_tokens + u.completion_tokens <= CTX, u
        r = client.completions.create(model=MODEL, prompt="1, 2, 3,", max_tokens=2**62, temperature=0)
        u = r.usage
        assert u.prompt_tokens + u.completion_tokens <= CTX, u

    @case
    def prompt_over_context():
        try:
            chat("word " * 2000, max_tokens=4)
        except openai.BadRequestError as e:
            assert e.status_code == 400
            assert e.body["code"] == "context_length_exceeded", e.body
            assert str(CTX) in e.body["message"], e.body
        else:
            raise AssertionError("a prompt over the context was accepted")

    @case
    def ten_megabyte_body():
        big = json.dumps({"prompt": "x" * (10 << 20), "max_tokens": 1}).encode()
        try:
            r = raw("POST", "/v1/completions", big, timeout=60)
            assert_error(r, 413)
        except (OSError, http.client.HTTPException):
            pass  # refused and closed before the whole body was sent: also right
        assert raw("GET", "/health").status_code == 200

    @case
    def client_disconnects_mid_stream():
        before = metric("gpack_requests_cancelled_total")
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0,
                           "stream": True}).encode()
        s = socket.create_connection((HOST, PORT), timeout=30)
        s.sendall(http_req("/v1/completions", body))
        got = b""
        for _ in range(1000):
            got += s.recv(4096)
            if got.count(b"data: ") >= 3:
                break
        s.close()
        assert b"200 OK" in got, got[:200]
        deadline = time.time() + 30
        while time.time() < deadline and metric("gpack_requests_cancelled_total") <= before:
            time.sleep(0.1)
        assert metric("gpack_requests_cancelled_total") > before, "generation was not cancelled"
        assert chat("Hi", max_tokens=2).choices[0].message.content is not None

    @case
    def two_hundred_connections_at_once():
        body = json.dumps({"prompt": "Hello", "max_tokens": 2, "temperature": 0}).encode()
        req = http_req("/v1/completions", body)
        barrier = threading.Barrier(200, timeout=60)

        def one(_):
            barrier.wait()
            try:
                out = raw_socket(req, timeout=120)
            except OSError as e:
                # A connection the server reset or never answered is a failure.
                return ("dropped", repr(e))
            head = out.split(b"\r\n\r\n", 1)[0].decode(errors="replace")
            status = int(head.split(" ", 2)[1]) if head.startswith("HTTP/1.1 ") else 0
            if status == 503:
                assert "retry-after" in head.lower(), head
            return (status, head)

        with cf.ThreadPoolExecutor(200) as ex:
            res = list(ex.map(one, range(200), timeout=600))
        statuses = [r[0] for r in res]
        # Every connection gets an answer: served, or refused with 503 and
        # Retry-After; none dropped, none with another status.
        bad = [r for r in res if r[0] not in (200, 503)]
        assert not bad, (len(bad), bad[:3])
        # Admission takes PARALLEL + QUEUE requests at once, so at least that
        # many of a simultaneous burst are served.
        assert statuses.count(200) >= PARALLEL + QUEUE, statuses
        print(f"  200 connections: {statuses.count(200)} served, {statuses.count(503)} got 503, "
              f"{statuses.count('dropped')} dropped", flush=True)
        assert raw("GET", "/health").status_code == 200
        assert chat("Hi", max_tokens=2).choices[0].message.content is not None

    @case
    def unknown_endpoint_and_method():
        assert_error(raw("GET", "/v1/nothing"), 404)
        assert raw("GET", "/v1/chat/completions").status_code == 405


# ---------------------------------------------------------------- auth


def auth():
    @case
    def api_key_required():
        bad = openai.OpenAI(base_url=BASE + "/v1", api_key="wrong", timeout=30, max_retries=0)
        try:
            bad.models.list()
        except openai.AuthenticationError as e:
            assert e.status_code == 401
        else:
            raise AssertionError("a wrong key was accepted")
        r = raw("POST", "/v1/chat/completions", json.dumps({"messages": []}))
        assert_error(r, 401)
        assert raw("GET", "/health").status_code == 200
        assert chat("Hi", max_tokens=2).choices[0].message is not None


# ---------------------------------------------------------------- structured


def structured():
    import re

    import jsonschema

    from structured_cases import CASES

    def schema_format(schema, name="answer"):
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}

    @case
    def json_schema_outputs_parse_and_validate():
        def one(c):
            prompt, schema = c
            r = chat(prompt, max_tokens=160, temperature=0, response_format=schema_format(schema))
            text = r.choices[0].message.content
            assert r.choices[0].finish_reason == "stop", (prompt, r.choices[0].finish_reason, text)
            value = json.loads(text)
            jsonschema.validate(value, schema)
            return text

        # The first one alone: the client's response types are built on first use,
        # not thread-safely (see sixteen_concurrent_streams_equal_alone).
        outs = [one(CASES[0])]
        with cf.ThreadPoolExecutor(4) as ex:
            outs += list(ex.map(one, CASES[1:], timeout=600))
        print("  e.g. " + " | ".join(outs[:3]), flush=True)

    @case
    def json_schema_streamed_equals_non_streamed():
        prompt, schema = CASES[10]
        full = chat(prompt, max_tokens=160, temperature=0, response_format=schema_format(schema))
        _, text = stream_chat(prompt, max_tokens=160, temperature=0, response_format=schema_format(schema))
        assert text == full.choices[0].message.content, (text, full.choices[0].message.content)
        jsonschema.validate(json.loads(text), schema)

    @case
    def json_schema_on_completions():
        prompt, schema = CASES[0]
        r = client.completions.create(model=MODEL, prompt=prompt + "\nJSON:", max_tokens=120, temperature=0,
                                      extra_body={"response_format": schema_format(schema)})
        jsonschema.validate(json.loads(r.choices[0].text), schema)

    @case
    def json_object_parses():
        r = chat("Return a JSON object with the name and age of Bob, who is 25.", max_tokens=200, temperature=0,
                 response_format={"type": "json_object"})
        assert r.choices[0].finish_reason == "stop", r.choices[0]
        assert isinstance(json.loads(r.choices[0].message.content), dict)

    @case
    def sampled_json_schema_validates():
        # Not only greedy: sampling at temperature 1 from the masked logits.
        prompt, schema = CASES[14]
        for seed in range(3):
            r = chat(prompt, max_tokens=200, temperature=1.0, seed=seed, response_format=schema_format(schema))
            if r.choices[0].finish_reason == "stop":
                jsonschema.validate(json.loads(r.choices[0].message.content), schema)
            else:
                # Cut by max_tokens: still a prefix the grammar allowed.
                assert r.choices[0].message.content.startswith("{"), r.choices[0]

    @case
    def lark_grammar():
        g = 'start: "The answer is " ("yes" | "no") ". Because " /[a-z ]{1,40}/ "."'
        r = client.completions.create(model=MODEL, prompt="Is the sky blue?", max_tokens=60, temperature=0,
                                      extra_body={"grammar": g})
        text = r.choices[0].text
        assert re.fullmatch(r"The answer is (yes|no)\. Because [a-z ]{1,40}\.", text), text
        assert r.choices[0].finish_reason == "stop", r.choices[0]
        r = chat("List some animals.", max_tokens=60, temperature=0,
                 extra_body={"grammar": 'start: item ("," item){1,3}\nitem: /[a-z]{2,10}/'})
        assert re.fullmatch(r"[a-z]{2,10}(,[a-z]{2,10}){1,3}", r.choices[0].message.content), r.choices[0]

    @case
    def refused_constraints_are_400():
        def post(body):
            body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4, **body}
            return raw("POST", "/v1/chat/completions", json.dumps(body))

        assert_error(post({"response_format": schema_format({"type": "no-such-type"})}), 400, "response_format")
        assert_error(post({"response_format": schema_format({"type": "integer", "minimum": 5, "maximum": 1})}),
                     400, "response_format")
        assert_error(post({"response_format": {"type": "json_schema"}}), 400, "response_format")
        assert_error(post({"response_format": {"type": "xml"}}), 400, "response_format")
        assert_error(post({"response_format": schema_format({"enum": ["x" * 1000] * 100})}), 400,
                     "response_format")
        assert_error(post({"grammar": "start: undefined_rule"}), 400, "grammar")
        assert_error(post({"grammar": "start: ("}), 400, "grammar")
        assert_error(post({"grammar": 7}), 400, "grammar")
        assert_error(post({"grammar": 'start: "a"', "response_format": {"type": "json_object"}}), 400, "grammar")
        # The server still serves after refusals.
        assert chat("Hi", max_tokens=2).choices[0].message is not None

    @case
    def mask_cost_in_metrics():
        assert metric("gpack_grammar_mask_seconds_count") > 0
        per_token = metric("gpack_grammar_mask_seconds_sum") / metric("gpack_grammar_mask_seconds_count")
        print(f"  mask: {per_token * 1e6:.0f} us per token", flush=True)


# ---------------------------------------------------------------- sampling


def sampling():
    import math

    @case
    def chat_logprobs_and_top_logprobs():
        r = chat("Name a color.", max_tokens=8, temperature=0, logprobs=True, top_logprobs=5)
        c = r.choices[0]
        content = c.logprobs.content
        assert content and len(content) == r.usage.completion_tokens, (len(content), r.usage)
        assert "".join(t.token for t in content) == c.message.content, (content, c.message.content)
        for t in content:
            assert len(t.top_logprobs) == 5, t
            # Greedy: the sampled token is the most likely one.
            assert t.top_logprobs[0].token == t.token and t.top_logprobs[0].logprob == t.logprob, t
            lps = [x.logprob for x in t.top_logprobs]
            assert lps == sorted(lps, reverse=True) and all(x <= 0 for x in lps), lps
            assert sum(math.exp(x) for x in lps) <= 1.0 + 1e-4, lps
            assert bytes(t.bytes).decode(errors="replace") == t.token

    @case
    def streamed_logprobs_equal_non_streamed():
        kw = dict(max_tokens=8, temperature=0, logprobs=True, top_logprobs=2)
        full = chat("Name a fruit.", **kw).choices[0].logprobs.content
        chunks, _ = stream_chat("Name a fruit.", **kw)
        streamed = [t for c in chunks if c.choices and c.choices[0].logprobs
                    for t in c.choices[0].logprobs.content]
        assert [(t.token, t.logprob) for t in streamed] == [(t.token, t.logprob) for t in full]

    @case
    def completions_logprobs_shape():
        r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=5,
                                      temperature=0, logprobs=2)
        lp = r.choices[0].logprobs
        assert "".join(lp.tokens) == r.choices[0].text, (lp.tokens, r.choices[0].text)
        assert len(lp.token_logprobs) == len(lp.tokens) == len(lp.top_logprobs) == len(lp.text_offset)
        assert lp.text_offset[0] == 0 and all(len(t) == 2 for t in lp.top_logprobs), lp

    @case
    def n_choices():
        r = chat("Write a word.", max_tokens=12, temperature=1.0, seed=5, n=4)
        assert [c.index for c in r.choices] == [0, 1, 2, 3], r.choices
        texts = {c.message.content for c in r.choices}
        assert len(texts) >= 2, texts
        assert r.usage.completion_tokens <= 4 * 12
        # The same seed: the same choices.
        r2 = chat("Write a word.", max_tokens=12, temperature=1.0, seed=5, n=4)
        assert [c.message.content for c in r2.choices] == [c.message.content for c in r.choices]
        # Greedy choices streamed: each index reassembles the greedy answer.
        g = chat("Write a word.", max_tokens=12, temperature=0)
        greedy = g.choices[0].message.content
        chunks, _ = stream_chat("Write a word.", max_tokens=12, temperature=0, n=3,
                                stream_options={"include_usage": True})
        per = {}
        for c in chunks:
            for ch in c.choices:
                per[ch.index] = per.get(ch.index, "") + (ch.delta.content or "")
        assert per == {0: greedy, 1: greedy, 2: greedy}, per
        finishes = [ch.index for c in chunks for ch in c.choices if ch.finish_reason]
        assert sorted(finishes) == [0, 1, 2], finishes
        assert chunks[-1].usage.completion_tokens == 3 * g.usage.completion_tokens, chunks[-1].usage

    @case
    def penalties_lower_greedy_repetition():
        from collections import Counter

        def tokens(**kw):
            r = client.completions.create(model=MODEL, prompt="1, 2, 3, 1, 2, 3, 1, 2, 3,", max_tokens=24,
                                          temperature=0, logprobs=0, extra_body=kw)
            return r.choices[0].logprobs.tokens

        plain = tokens()
        pen = tokens(frequency_penalty=1.5, presence_penalty=1.0)
        most = lambda ts: Counter(ts).most_common(1)[0][1]
        assert most(pen) < most(plain), (plain, pen)

    @case
    def completions_stream_include_usage():
        s = client.completions.create(model=MODEL, prompt="Hi", max_tokens=6, temperature=0, stream=True,
                                      stream_options={"include_usage": True})
        chunks = list(s)
        assert chunks[-1].usage is not None and chunks[-1].choices == [], chunks[-1]
        assert all(c.usage is None for c in chunks[:-1])
        assert 0 < chunks[-1].usage.completion_tokens <= 6

    @case
    def embeddings_with_the_client():
        r = client.embeddings.create(model=MODEL, input=["The cat sat.", "A dog ran.", "The cat sat."])
        vs = [d.embedding for d in r.data]
        assert [d.index for d in r.data] == [0, 1, 2] and len(vs[0]) == 576, (len(vs), len(vs[0]))
        assert all(abs(sum(x * x for x in v) - 1) < 1e-4 for v in vs)
        assert vs[0] == vs[2] and vs[0] != vs[1]
        assert r.usage.prompt_tokens > 6

    @case
    def limits_are_400():
        def post(body):
            body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, **body}
            return raw("POST", "/v1/chat/completions", json.dumps(body))

        assert_error(post({"n": 9}), 400, "n")
        assert_error(post({"logprobs": True, "top_logprobs": 21}), 400, "top_logprobs")
        assert_error(post({"top_logprobs": 3}), 400, "top_logprobs")
        assert_error(post({"presence_penalty": 3}), 400, "presence_penalty")
        assert_error(post({"frequency_penalty": -2.5}), 400, "frequency_penalty")


# ---------------------------------------------------------------- tools

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 20},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Adds two integers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 999},
                                                    "b": {"type": "integer", "minimum": 0, "maximum": 999}},
                   "required": ["a", "b"], "additionalProperties": False}}}
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def tool_round_trip():
    """A named call, its arguments valid, its result fed back as a tool message."""
    import jsonschema

    q = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model=MODEL, messages=q, tools=[WEATHER, ADD], tool_choice=NAMED,
                                       max_tokens=80, temperature=0)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c
    call = c.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather" and call.id, call
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
    follow = q + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "name": "get_weather", "content": '{"temp": 21}'},
    ]
    r2 = client.chat.completions.create(model=MODEL, messages=follow, tools=[WEATHER, ADD], tool_choice="none",
                                        max_tokens=16, temperature=0)
    # The result was rendered into the prompt; the answer is text (which a
    # 135M model given a foreign family's template may leave empty).
    assert r2.choices[0].message.tool_calls is None and isinstance(r2.choices[0].message.content, str)
    assert r2.usage.prompt_tokens > r.usage.prompt_tokens, (r2.usage, r.usage)
    return call


def streamed_call():
    """A named call streamed: the id and name first, then the arguments in
    fragments as they are generated, concatenating to the non-streamed call's."""
    import jsonschema

    chunks, text = stream_chat("What is the weather in Rome?", tools=[WEATHER], tool_choice=NAMED,
                               max_tokens=80, temperature=0)
    assert text == "", text
    deltas = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    assert deltas and deltas[0].index == 0 and deltas[0].id and deltas[0].function.name == "get_weather"
    args = "".join(d.function.arguments or "" for d in deltas)
    jsonschema.validate(json.loads(args), WEATHER["function"]["parameters"])
    # Fragments, not one delta at the end; only the first carries id and name.
    assert sum(1 for d in deltas if d.function.arguments) >= 3, deltas
    assert all(d.id is None and d.function.name is None for d in deltas[1:]), deltas
    assert all(d.index == 0 for d in deltas), deltas
    assert chunks[-1].choices[0].finish_reason == "tool_calls", chunks[-1]
    # The same call as the non-streamed answer.
    full = chat("What is the weather in Rome?", tools=[WEATHER], tool_choice=NAMED, max_tokens=80,
                temperature=0).choices[0].message.tool_calls[0]
    assert (full.function.name, full.function.arguments) == ("get_weather", args)
    return len(deltas)


def tools():
    import jsonschema

    @case
    def named_call_round_trip():
        tool_round_trip()

    @case
    def required_picks_one_of_the_tools():
        r = chat("Add 2 and 3.", tools=[WEATHER, ADD], tool_choice="required", max_tokens=80, temperature=0)
        call = r.choices[0].message.tool_calls[0]
        tool = {"get_weather": WEATHER, "add": ADD}[call.function.name]
        jsonschema.validate(json.loads(call.function.arguments), tool["function"]["parameters"])

    @case
    def streamed_call_deltas():
        streamed_call()

    @case
    def auto_answers_text_or_calls():
        r = chat("Hello!", tools=[WEATHER], max_tokens=40, temperature=0)
        m = r.choices[0].message
        if m.tool_calls:
            assert r.choices[0].finish_reason == "tool_calls" and m.tool_calls[0].function.name == "get_weather"
            json.loads(m.tool_calls[0].function.arguments)
        else:
            assert m.content and "<tool_call>" not in m.content, m

    @case
    def bad_tools_are_400():
        def post(body):
            body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, **body}
            return raw("POST", "/v1/chat/completions", json.dumps(body))

        assert_error(post({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
                     400, "tool_choice")
        assert_error(post({"tools": [{"type": "function"}]}), 400, "tools")
        assert_error(post({"tools": "x"}), 400, "tools")
        bad_schema = {"type": "function", "function": {"name": "f", "parameters": {"type": "no-such-type"}}}
        assert_error(post({"tools": [bad_schema], "tool_choice": "required"}), 400, "tools")
        assert_error(post({"tool_choice": "required"}), 400, "tool_choice")
        assert_error(post({"tools": [WEATHER], "tool_choice": "required",
                           "response_format": {"type": "json_object"}}), 400, "tool_choice")
        bad_args = [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": "{not json"}}]}]
        assert_error(raw("POST", "/v1/chat/completions", json.dumps({"messages": bad_args, "tools": [WEATHER]})),
                     400, "messages")


def structured_texts():
    """Prints (one JSON line) the greedy answers to every structured case, a
    json_object request and a Lark grammar request: serve.rs compares them
    between a server whose greedy slots compute masks lazily and one that
    computes every mask (GPACK_TEST_EAGER_MASKS=1)."""
    from structured_cases import CASES

    def one(c):
        prompt, fmt = c
        r = chat(prompt, max_tokens=160, temperature=0, **fmt)
        return [r.choices[0].message.content, r.choices[0].finish_reason]

    reqs = [(p, {"response_format": {"type": "json_schema",
                                     "json_schema": {"name": "answer", "schema": s, "strict": True}}})
            for p, s in CASES]
    reqs.append(("Describe a cat as JSON.", {"response_format": {"type": "json_object"}}))
    reqs.append(("Say yes or no: is water wet?",
                 {"extra_body": {"grammar": 'start: ("yes" | "no") " because " /[a-z ]{1,40}/ "."'}}))
    outs = [one(reqs[0])]
    with cf.ThreadPoolExecutor(4) as ex:
        outs += list(ex.map(one, reqs[1:], timeout=600))
    results.append(("structured_texts", None))
    print(json.dumps(outs), flush=True)


def tool_format():
    @case
    def named_call_round_trip():
        call = tool_round_trip()
        print(f"  {call.function.name}({call.function.arguments})", flush=True)

    @case
    def streamed_call_deltas():
        print(f"  {streamed_call()} deltas", flush=True)


{"basic": basic, "concurrency": concurrency, "abuse": abuse, "auth": auth,
 "structured": structured, "structured_texts": structured_texts, "sampling": sampling, "tools": tools, "tool_format": tool_format}[GROUP]()
failed = sum(1 for _, e in results if e is not None)
print(f"{len(results) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
