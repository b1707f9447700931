#!/usr/bin/env python3
"""Time to first token with a 4,096-token shared prefix (issue 44, "Measure"):
gpack serve (--kv-cache-dir) against llama-server (--cache-reuse, and its slot
save/restore), alternating rounds. Run by bench/kvcache.sh, which says how.

Per round, each side on a fresh server, 2 threads, one slot, greedy, 1 token:
  cold            prefix + question 1, nothing cached
  warm memory     prefix + question 2 on the same server
  after restart   a new server process: gpack reads the block files of its
                  --kv-cache-dir; llama-server restores the slot saved before
                  the restart (POST /slots/0?action=restore, timed with the request)
  other process   gpack: a second server started beside the restarted one,
                  same directory (llama-server has no equivalent: n/a)
Prints medians with min-max and the ratios the issue names."""
import json, os, shutil, signal, subprocess, sys, tempfile, time, urllib.request

gpack, llama_bin, gguf, gpk, reps, threads = sys.argv[1:7]
reps, threads = int(reps), str(threads)
corpus = open(os.path.join(os.path.dirname(__file__), "../testdata/perplexity/corpus.txt")).read()
CTX = 4096 + 512


def ntok(text):
    out = subprocess.run([gpack, "tokenize", gpk, text], capture_output=True, text=True, check=True).stdout
    return len(out.split())


# The longest start of the corpus (cut at a space) of at most 4096 tokens.
lo, hi = 1000, len(corpus)
while hi - lo > 200:
    mid = (lo + hi) // 2
    if ntok(corpus[:mid]) <= 4096:
        lo = mid
    else:
        hi = mid
prefix = corpus[:lo].rsplit(" ", 1)[0]
print(f"prefix: {ntok(prefix)} tokens", flush=True)
QUESTIONS = [f"\n\nQuestion {i}: summarize the text above in one word. Answer:" for i in range(4)]


def post(port, path, body, timeout=900):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def ttft(port, q, extra=None):
    body = {"prompt": prefix + QUESTIONS[q], "max_tokens": 1, "temperature": 0, "cache_prompt": True}
    t = time.perf_counter()
    r = post(port, "/v1/completions", body)
    dt = time.perf_counter() - t
    return dt, r.get("usage", {}).get("prompt_tokens_details", {}).get("cached_tokens")


def up(port, proc):
    for _ in range(3000):
        if proc.poll() is not None:
            raise SystemExit(f"server on {port} exited")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
            return
        except Exception:
            time.sleep(0.1)
    raise SystemExit(f"server on {port} did not start")


def start(cmd, port):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    up(port, p)
    return p


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


port = 20000 + os.getpid() % 20000
res = {k: [] for k in ["g_cold", "g_mem", "g_restart", "g_other", "l_cold", "l_mem", "l_restart", "l_restore"]}
work = tempfile.mkdtemp()
try:
    for r in range(reps):
        # gpack
        kv = os.path.join(work, "kv")
        shutil.rmtree(kv, ignore_errors=True)
        g = lambda p: [gpack, "serve", gpk, "--port", str(p), "--parallel", "1", "--ctx", str(CTX),
                       "--threads", threads, "--spec", "none", "--verify", "off", "--kv-cache-dir", kv]
        a = start(g(port), port)
        res["g_cold"].append(ttft(port, 0)[0])
        res["g_mem"].append(ttft(port, 1)[0])
        time.sleep(2)  # the writer thread's last block files
        stop(a)
        b = start(g(port + 1), port + 1)
        dt, cached = ttft(port + 1, 2)
        res["g_restart"].append(dt)
        m = urllib.request.urlopen(f"http://127.0.0.1:{port + 1}/metrics").read().decode()
        ms = next(float(l.split()[1]) for l in m.splitlines()
                  if l.startswith("gpack_kv_cache_restore_milliseconds_total "))
        res.setdefault("g_restore", []).append(ms / 1000)
        c = start(g(port + 2), port + 2)
        res["g_other"].append(ttft(port + 2, 3)[0])
        stop(b)
        stop(c)
        print(f"round {r}: gpack cold {res['g_cold'][-1]:.2f} s, memory {res['g_mem'][-1]:.3f} s, "
              f"restart {res['g_restart'][-1]:.3f} s ({cached} cached; reading, checking and copying "
              f"the blocks {res['g_restore'][-1]:.3f} s), other {res['g_other'][-1]:.3f} s", flush=True)
        # llama-server
        slots = os.path.join(work, "slots")
        os.makedirs(slots, exist_ok=True)
        l = lambda p: [os.path.join(llama_bin, "llama-server"), "-m", gguf, "--port", str(p), "-np", "1",
                       "-c", str(CTX), "-t", threads, "--cache-reuse", "256", "--slot-save-path", slots + "/"]
        a = start(l(port + 3), port + 3)
        res["l_cold"].append(ttft(port + 3, 0)[0])
        res["l_mem"].append(ttft(port + 3, 1)[0])
        post(port + 3, "/slots/0?action=save", {"filename": "prefix.bin"})
        stop(a)
        b = start(l(port + 4), port + 4)
        t = time.perf_counter()
        post(port + 4, "/slots/0?action=restore", {"filename": "prefix.bin"})
        restore = time.perf_counter() - t
        dt = ttft(port + 4, 2)[0]
        res["l_restore"].append(restore)
        res["l_restart"].append(restore + dt)
        stop(b)
        print(f"round {r}: llama cold {res['l_cold'][-1]:.2f} s, memory {res['l_mem'][-1]:.3f} s, "
              f"restore+request {res['l_restart'][-1]:.3f} s (restore {restore:.3f} s)", flush=True)
finally:
    shutil.rmtree(work, ignore_errors=True)


def med(v):
    v = sorted(v)
    m = v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
    return m, v[0], v[-1]


def fmt(k):
    m, a, b = med(res[k])
    return f"{m:.3f} s ({a:.3f}–{b:.3f})"


print(f"\nTTFT, 4096-token prefix + question, {reps} rounds, median (min–max):")
print(f"  {'':16}{'gpack':>28}{'llama-server':>28}")
for name, gk, lk in [("cold", "g_cold", "l_cold"), ("warm memory", "g_mem", "l_mem"),
                     ("after restart", "g_restart", "l_restart"), ("other process", "g_other", None)]:
    print(f"  {name:16}{fmt(gk):>28}{(fmt(lk) if lk else 'n/a'):>28}")
gc, gr, lr = med(res["g_cold"])[0], med(res["g_restart"])[0], med(res["l_restart"])[0]
print(f"gpack after restart / gpack cold: {gr / gc:.4f} (goal <= 0.05)")
print(f"gpack after restart / llama-server restore+request: {gr / lr:.3f} (goal <= 1.0)")
print(f"gpack cold / llama-server cold: {gc / med(res['l_cold'])[0]:.2f}")
print(f"gpack blocks read from disk, checked and copied in (after restart): {fmt('g_restore')}; "
      f"restore / cold TTFT: {med(res['g_restore'])[0] / gc:.4f} (copying blocks in, not paged attention)")
