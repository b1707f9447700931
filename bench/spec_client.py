"""Client of bench/spec.sh: one streamed, greedy chat completion at a time
against an OpenAI-compatible server (stdlib only, the same code for both
servers). Prints one JSON line per repetition:
  {"decode_tps", "tokens", "ttft_ms", "sha"}
decode_tps = (completion tokens - 1) / (time of the last chunk - time of the
first), tokens from the usage the server reports; sha is the SHA-256 of the
answer's text (to check that speculation left it unchanged).

Usage: python3 spec_client.py BASE_URL PROMPT_FILE REPS MAX_TOKENS
"""

import hashlib
import http.client
import json
import sys
import time
import urllib.parse

BASE, PROMPT_FILE, REPS, MAX_TOKENS = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
U = urllib.parse.urlparse(BASE)
PROMPT = open(PROMPT_FILE, encoding="utf-8").read()


def once():
    body = json.dumps({
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS, "temperature": 0, "seed": 1,
        "stream": True, "stream_options": {"include_usage": True},
    })
    c = http.client.HTTPConnection(U.hostname, U.port, timeout=900)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body=body,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, (r.status, r.read()[:300])
    first = last = None
    text = []
    usage = None
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices") or []:
            piece = (ch.get("delta") or {}).get("content")
            if piece:
                now = time.perf_counter()
                first = first or now
                last = now
                text.append(piece)
    c.close()
    assert usage, "the server sent no usage"
    n = usage["completion_tokens"]
    dt = max((last or 0) - (first or 0), 1e-9)
    return {
        "decode_tps": (n - 1) / dt,
        "tokens": n,
        "ttft_ms": ((first or t0) - t0) * 1e3,
        "sha": hashlib.sha256("".join(text).encode()).hexdigest()[:16],
    }


for _ in range(REPS):
    print(json.dumps(once()), flush=True)
