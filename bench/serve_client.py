"""Load generator for bench/serve.sh: OpenAI-style streaming requests over
loopback, stdlib only (so that the client costs the same against both servers).

Usage: python3 serve_client.py BASE_URL single|concurrent REPS [STREAMS] [MAX_TOKENS] [text|json]
  json: every request carries response_format json_schema with SCHEMA below (an
  array of at least 64 short strings: the answer cannot end before MAX_TOKENS
  of up to ~200), for constrained-decoding cost (bench/structured.sh).
Prints one JSON object per repetition:
  single:     {"ttft_ms", "decode_tps", "tokens"}            (one request at a time)
  concurrent: {"aggregate_tps", "aggregate_decode_tps", "tokens", "wall_s", "ttft_ms_median"}
              (STREAMS at once; aggregate_decode_tps sums each stream's rate after its first token)
Tokens are counted from the usage the server reports when it does, else from
the number of non-empty text chunks (one token each on both servers).
"""

import http.client
import json
import sys
import threading
import time
import urllib.parse

BASE, MODE, REPS = sys.argv[1], sys.argv[2], int(sys.argv[3])
STREAMS = int(sys.argv[4]) if len(sys.argv) > 4 else 8
MAX_TOKENS = int(sys.argv[5]) if len(sys.argv) > 5 else 128
FORMAT = sys.argv[6] if len(sys.argv) > 6 else "text"
SCHEMA = {"type": "array", "minItems": 64, "items": {"type": "string", "minLength": 1, "maxLength": 24}}
U = urllib.parse.urlparse(BASE)

PROMPTS = [
    "Once upon a time, in a small village by the sea,",
    "The history of the Roman Empire begins",
    "Here is a long explanation of how computers work:",
    "My favourite recipe for a chocolate cake is",
    "The most important inventions of the twentieth century were",
    "A guide to planting a vegetable garden:",
    "In the year 2100, cities will",
    "The rules of chess are as follows:",
]


def one(prompt, out):
    req = {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
           "stream": True, "stream_options": {"include_usage": True}}
    if FORMAT == "json":
        req["response_format"] = {"type": "json_schema",
                                  "json_schema": {"name": "list", "schema": SCHEMA, "strict": True}}
    body = json.dumps(req)
    c = http.client.HTTPConnection(U.hostname, U.port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, (r.status, r.read()[:300])
    first = last = None
    chunks = 0
    usage = None
    buf = b""
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        if ev.get("usage"):
            usage = ev["usage"]["completion_tokens"]
        for ch in ev.get("choices") or []:
            if ch.get("text"):
                now = time.perf_counter()
                if first is None:
                    first = now
                last = now
                chunks += 1
    end = time.perf_counter()
    c.close()
    n = usage if usage else chunks
    out.append({"t0": t0, "first": first, "last": last or end, "end": end, "tokens": n})


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


one(PROMPTS[0], [])  # warm-up
for rep in range(REPS):
    if MODE == "single":
        out = []
        one(PROMPTS[rep % len(PROMPTS)], out)
        o = out[0]
        print(json.dumps({
            "ttft_ms": (o["first"] - o["t0"]) * 1e3,
            "decode_tps": (o["tokens"] - 1) / max(o["last"] - o["first"], 1e-9),
            "tokens": o["tokens"],
        }), flush=True)
    else:
        out = []
        ts = [threading.Thread(target=one, args=(PROMPTS[i % len(PROMPTS)], out)) for i in range(STREAMS)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join(600)
        wall = max(o["end"] for o in out) - t0
        tokens = sum(o["tokens"] for o in out)
        print(json.dumps({
            "aggregate_tps": tokens / wall,
            # Decode only (after each stream's first token, so without the
            # prompts' prefill and the grammars' compilation): the sum of the
            # streams' own rates, which run at the same time.
            "aggregate_decode_tps": sum((o["tokens"] - 1) / max(o["last"] - o["first"], 1e-9) for o in out),
            "tokens": tokens,
            "wall_s": wall,
            "ttft_ms_median": median([(o["first"] - o["t0"]) * 1e3 for o in out]),
        }), flush=True)
