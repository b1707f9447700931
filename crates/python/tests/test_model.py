"""gpack.Model: greedy generation equals `gpack run` on the same file; chat
completions, streaming, stop strings, the GIL released while computing."""

import threading
import time

import pytest

import gpack
from conftest import run_cli

PROMPTS = ["The capital of France is", "Once upon a time, in a small village by the sea,", "def fibonacci(n):"]
N = 24


def cli_run(model, prompt, n=N, chat=False, extra=()):
    args = ["run", model, "-p", prompt, "-n", n, "--temp", "0"] + (["--chat"] if chat else []) + list(extra)
    out = run_cli(*args).stdout
    assert out.endswith("\n")
    return out[:-1]


@pytest.fixture(scope="module")
def smol(smol_gpack):
    return gpack.Model(smol_gpack)


def test_greedy_equals_gpack_run(smol, smol_gpack):
    for p in PROMPTS:
        assert smol.generate(p, N) == cli_run(smol_gpack, p), p


def test_greedy_equals_gpack_run_from_gguf(smol_gguf):
    m = gpack.Model(smol_gguf)
    assert m.generate(PROMPTS[0], N) == cli_run(smol_gguf, PROMPTS[0])


def test_greedy_equals_gpack_run_tiny_models(tiny_gpacks):
    for qtype in ("Q4_K", "IQ4_XS", "F16"):
        path = tiny_gpacks[qtype][1]
        m = gpack.Model(path)
        assert m.generate("Hello world", 16) == cli_run(path, "Hello world", 16), qtype


def test_speculative_decoding_keeps_the_text(smol):
    code = "def area(w, h):\n    a = w * h\n    return a\n"
    prompt = f"Rewrite this code, renaming area to surface:\n{code}\nRewritten:\n"
    plain = smol.generate_ids(prompt, 48, speculative="none")
    spec = smol.generate_ids(prompt, 48)  # "ngram", the default
    assert spec["tokens"] == plain["tokens"] and spec["text"] == plain["text"]
    assert plain["drafted"] == 0 and spec["accepted"] > 0, spec
    sampled = dict(temperature=0.9, seed=7)
    assert smol.generate(prompt, 32, speculative="none", **sampled) == smol.generate(prompt, 32, **sampled)
    for bad in ("draft", "fast"):
        with pytest.raises(ValueError):
            smol.generate(prompt, 4, speculative=bad)
    # SmolLM2 has no multi-token-prediction block.
    with pytest.raises(ValueError, match="multi-token-prediction"):
        smol.generate(prompt, 4, speculative="mtp")


def test_mtp_speculation_keeps_the_text():
    # The tiny GLM-4.7-Flash fixture carries one MTP block (testdata/scripts/36_make_tiny_glm4_mtp.py).
    # Its random block drafts only where it is confident (p >= 0.5): the runtime's and the CLI's
    # tests force drafting; this one checks the mode runs and keeps the text.
    from conftest import TESTDATA

    m = gpack.Model(str(TESTDATA / "tiny/glm4-mtp/glm4-mtp-f16.gguf"))
    prompt = "one two three four five six seven eight"
    plain = m.generate_ids(prompt, 40, speculative="none")
    spec = m.generate_ids(prompt, 40, speculative="mtp")
    assert spec["tokens"] == plain["tokens"] and spec["text"] == plain["text"]
    sampled = dict(temperature=0.8, seed=3)
    assert m.generate(prompt, 24, speculative="mtp", **sampled) == m.generate(prompt, 24, speculative="none", **sampled)


def test_chat_equals_gpack_run_chat(smol, smol_gpack):
    q = "What is 2+2?"
    want = cli_run(smol_gpack, q, chat=True)
    tok = gpack.Tokenizer(smol_gpack)
    ids = tok.apply_chat_template([{"role": "user", "content": q}], tokenize=True)
    assert smol.generate(ids, N) == want
    r = smol.create_chat_completion([{"role": "user", "content": q}], temperature=0, max_tokens=N)
    assert r["object"] == "chat.completion"
    c = r["choices"][0]
    assert c["message"] == {"role": "assistant", "content": want}
    assert c["finish_reason"] in ("stop", "length")
    assert r["usage"]["prompt_tokens"] == len(ids)
    assert r["usage"]["total_tokens"] == len(ids) + r["usage"]["completion_tokens"]


def test_streams_equal_whole_results(smol):
    p = PROMPTS[1]
    whole = smol.generate(p, N)
    pieces = list(smol.generate(p, N, stream=True))
    assert len(pieces) > 1 and "".join(pieces) == whole
    msgs = [{"role": "user", "content": "Name a color."}]
    full = smol.create_chat_completion(msgs, temperature=0, max_tokens=12)
    chunks = list(smol.create_chat_completion(msgs, temperature=0, max_tokens=12, stream=True,
                                              stream_options={"include_usage": True}))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == full["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == full["choices"][0]["finish_reason"]
    assert chunks[-1]["usage"] == full["usage"]


def test_stop_strings_and_ids(smol):
    p = PROMPTS[0]
    whole = smol.generate(p, N)
    assert "\n" in whole
    assert smol.generate(p, N, stop=["\n"]) == whole[: whole.index("\n")]
    r = smol.generate_ids(p, N)
    assert r["text"] == whole
    if r["finish_reason"] == "length":
        assert len(r["tokens"]) == N
    else:
        # The model ended the text itself (an end-of-text or end-of-turn id)
        # within the budget: a larger budget gives the same text.
        assert r["finish_reason"] == "stop" and len(r["tokens"]) < N, r
        assert smol.generate(p, 2 * N) == whole
    assert smol.detokenize(r["tokens"]) == whole
    assert r["prompt_tokens"] == len(smol.tokenize(p))


def test_sampling_is_seeded(smol):
    a = smol.generate(PROMPTS[2], 16, temperature=0.9, seed=7)
    assert a == smol.generate(PROMPTS[2], 16, temperature=0.9, seed=7)


def test_closing_a_stream_stops_it(smol):
    s = smol.generate(PROMPTS[0], 1000, stream=True)
    next(s)
    s.close()
    with pytest.raises(StopIteration):
        next(s)
    # An abandoned stream is collected without harm, and the model still works.
    s = smol.generate(PROMPTS[0], 1000, stream=True)
    next(s)
    del s
    assert smol.generate(PROMPTS[0], 4) == smol.generate(PROMPTS[0], 4)


def test_generation_releases_the_gil(smol):
    done = threading.Event()
    out = []

    def work():
        out.append(smol.generate(PROMPTS[1], 48))
        done.set()

    t = threading.Thread(target=work)
    ticks = 0
    start = time.perf_counter()
    t.start()
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    t.join()
    elapsed = time.perf_counter() - start
    # With the GIL held for the whole generation this thread would not run
    # at all until it ended.
    assert elapsed > 0.05 and ticks >= 10, (elapsed, ticks)
    assert out[0] == smol.generate(PROMPTS[1], 48)


def test_bad_inputs_raise(smol, smol_gpack, workdir):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        smol.generate([1, 2, 10**6], 4)
    with pytest.raises(TypeError):
        smol.generate(3.5, 4)
    with pytest.raises(ValueError):
        smol.generate("x", 4, top_p=0.0)
    # generate and generate_ids share their checks.
    for call in (smol.generate, smol.generate_ids):
        with pytest.raises(ValueError, match="top_p"):
            call("x", 4, top_p=1.5)
        with pytest.raises(ValueError, match="stop strings must not be empty"):
            call("x", 4, stop=[""])
    with pytest.raises(ValueError, match="temperature"):
        smol.create_chat_completion([{"role": "user", "content": "x"}], temperature=5)
    with pytest.raises(ValueError, match="empty"):
        smol.create_chat_completion([])
    small = gpack.Model(smol_gpack, n_ctx=8)
    with pytest.raises(gpack.GpackError, match="context"):
        small.generate("one two three four five six seven eight nine ten", 4)
    with pytest.raises(ValueError):
        gpack.Model(smol_gpack, verify="never")
    junk = workdir / "junk-model.gguf"
    junk.write_bytes(b"GGUF" + b"\xff" * 60)
    with pytest.raises(gpack.GpackError):
        gpack.Model(junk)


def test_ctrl_c_stops_a_generation(smol):
    """Ctrl-C stops a generation within 100 ms wherever it is (a prefill
    chunk, decoding, a check of n-gram drafts), 20 times in a row."""
    import _thread
    import random

    rng = random.Random(1)
    long_prompt = " ".join(f"word{i}" for i in range(120))
    for i in range(20):
        fired = []

        def fire():
            fired.append(time.perf_counter())
            _thread.interrupt_main()

        timer = threading.Timer(rng.uniform(0.01, 0.4), fire)
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                # Would run until the 2048-position context is full (seconds).
                smol.generate(long_prompt if i % 2 else PROMPTS[0], 100000, ignore_eos=True)
            stopped = time.perf_counter()
        finally:
            timer.cancel()
            timer.join()
        assert fired, i
        assert stopped - fired[0] < 0.1, (i, stopped - fired[0])


def test_settings_equal_gpack_run(smol, smol_gpack):
    """Python, `gpack run` (and `gpack serve`: crates/server/tests) drive the
    one decoding slot: sampled, penalized and schema-constrained generations
    are the same text from either."""
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    import json as _json

    cases = [
        (dict(temperature=0.9, top_k=40, top_p=0.95, min_p=0.05, seed=7),
         ["--temp", "0.9", "--top-k", "40", "--top-p", "0.95", "--min-p", "0.05", "--seed", "7"]),
        (dict(presence_penalty=1.5, frequency_penalty=1.0),
         ["--presence-penalty", "1.5", "--frequency-penalty", "1.0"]),
        (dict(json_schema=schema), ["--json-schema", _json.dumps(schema)]),
        (dict(stop=["sea"]), ["--stop", "sea"]),
    ]
    p = PROMPTS[1]
    for kw, flags in cases:
        got = smol.generate(p, 40, **kw)
        args = ["run", smol_gpack, "-p", p, "-n", 40] + (["--temp", "0"] if "temperature" not in kw else []) + flags
        want = run_cli(*args).stdout
        assert want.endswith("\n")
        assert got == want[:-1], kw
    assert smol.generate(p, 40, json_schema=schema).startswith('{"name": "')


def test_logprobs_and_bad_constraints(smol):
    r = smol.generate_ids(PROMPTS[0], 8, logprobs=3)
    assert len(r["logprobs"]) == len(r["tokens"])
    for t, lp in zip(r["tokens"], r["logprobs"]):
        assert lp["token"] == t
        assert len(lp["top"]) == 3
        # Greedy: the emitted token is the most likely one.
        assert lp["top"][0][0] == t and lp["top"][0][1] == lp["logprob"] <= 0.0
    assert smol.generate_ids(PROMPTS[0], 4)["logprobs"] is None
    with pytest.raises(ValueError, match="json_schema"):
        smol.generate("x", 4, json_schema={"type": "no-such-type"})
    with pytest.raises(ValueError, match="grammar"):
        smol.generate("x", 4, grammar="start: (")
    with pytest.raises(ValueError, match="presence_penalty"):
        smol.generate("x", 4, presence_penalty=3.0)
    with pytest.raises(ValueError, match="kv: .*q9.*choose f32, f16, q8_0 or q4_0"):
        gpack.Model(smol.path, kv="q9")
    r = smol.create_chat_completion(
        [{"role": "user", "content": "Give a name and an age."}],
        temperature=0, max_tokens=40, logprobs=True, top_logprobs=2,
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": {
            "type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}}},
    )
    c = r["choices"][0]
    assert c["message"]["content"].startswith("{")
    assert len(c["logprobs"]["content"]) == r["usage"]["completion_tokens"]
    assert all(len(e["top_logprobs"]) == 2 for e in c["logprobs"]["content"])


def test_quantized_kv_equals_gpack_run(smol_gpack):
    """kv="q8_0" (and K/V apart) gives gpack run --kv q8_0's text; kv_f16= warns."""
    m = gpack.Model(smol_gpack, kv="q8_0")
    assert m.generate(PROMPTS[0], N) == cli_run(smol_gpack, PROMPTS[0], extra=["--kv", "q8_0"])
    m = gpack.Model(smol_gpack, kv_k="q8_0", kv_v="q4_0")
    want = cli_run(smol_gpack, PROMPTS[0], extra=["--kv-k", "q8_0", "--kv-v", "q4_0"])
    assert m.generate(PROMPTS[0], N) == want
    with pytest.warns(DeprecationWarning, match="kv_f16"):
        gpack.Model(smol_gpack, kv_f16=False)


def test_threads_setting(smol_gpack):
    """threads= sizes the model's own pool: the same text on 1 thread; 0 is an error."""
    m = gpack.Model(smol_gpack, threads=1)
    assert m.generate(PROMPTS[0], 8) == cli_run(smol_gpack, PROMPTS[0], 8)
    with pytest.raises(ValueError, match="threads"):
        gpack.Model(smol_gpack, threads=0)


def test_device_setting(smol_gpack):
    """device= as `gpack run --device`: on the GPU (lavapipe here, a software adapter:
    only `gpu` takes it) the greedy text equals `gpack run --device gpu`'s, also split by
    gpu_layers; `cpu` runs on the CPU; `auto` never takes a software adapter."""
    m = gpack.Model(smol_gpack, device="gpu")
    assert m.device.startswith("gpu: ") and "blocks and the head on the GPU" in m.device, m.device
    assert m.generate(PROMPTS[0], 16) == cli_run(smol_gpack, PROMPTS[0], 16, extra=["--device", "gpu"])
    split = gpack.Model(smol_gpack, device="gpu", gpu_layers=2)
    assert "2 blocks on the GPU" in split.device, split.device
    assert split.generate(PROMPTS[0], 16) == cli_run(
        smol_gpack, PROMPTS[0], 16, extra=["--device", "gpu", "--gpu-layers", "2"])
    assert gpack.Model(smol_gpack, device="cpu").device == "cpu"
    auto = gpack.Model(smol_gpack)
    assert auto.device == "cpu" or "software" not in auto.device, auto.device
    with pytest.raises(ValueError, match="device"):
        gpack.Model(smol_gpack, device="tpu")


def test_kv_cache_dir_shared_with_the_cli(smol_gpack, tmp_path):
    """kv_cache_dir= (a directory `gpack run --kv-cache-dir` also uses): a generation whose
    prompt starts with blocks another process wrote restores them (cached_tokens) and
    gives the text of a run without any cache; kv_cache_bytes= alone reuses blocks in
    memory; a directory others may write is refused."""
    prompt = " ".join(f"Note {i}: the valve {i} opens at {i * 3} bar." for i in range(30))
    kv = tmp_path / "kv"
    want = gpack.Model(smol_gpack).generate_ids(prompt, 12)
    cli_run(smol_gpack, prompt, 12, extra=["--kv-cache-dir", str(kv)])
    m = gpack.Model(smol_gpack, kv_cache_dir=kv)
    got = m.generate_ids(prompt, 12)
    assert got["tokens"] == want["tokens"]
    assert got["cached_tokens"] >= 128 and got["cached_tokens"] % 64 == 0, got
    mem = gpack.Model(smol_gpack, kv_cache_bytes=64 << 20)
    assert mem.generate_ids(prompt, 12)["cached_tokens"] == 0
    again = mem.generate_ids(prompt, 12)
    assert again["tokens"] == want["tokens"] and again["cached_tokens"] >= 128, again
    bad = tmp_path / "open"
    bad.mkdir(mode=0o777)
    bad.chmod(0o777)
    with pytest.raises(gpack.GpackError, match="not trusted"):
        gpack.Model(smol_gpack, kv_cache_dir=bad)


def test_gpu_memory_setting(smol_gpack):
    """gpu_memory= as `gpack run --gpu-memory`: a budget that holds the model runs every
    block on the GPU with `gpack run`'s text; one below a block's share is refused naming
    what it needs and the budget (a GpackError, not a crash); a bad size is a ValueError."""
    m = gpack.Model(smol_gpack, device="gpu", gpu_memory="4GiB")
    assert "against a budget of 4.00 GiB" in m.device, m.device
    assert m.generate(PROMPTS[0], 8) == cli_run(
        smol_gpack, PROMPTS[0], 8, extra=["--device", "gpu", "--gpu-memory", "4GiB"])
    with pytest.raises(gpack.GpackError, match="not even one block fits.*the budget is 4096"):
        gpack.Model(smol_gpack, device="gpu", gpu_memory=4096)
    with pytest.raises(ValueError, match="expected auto or a size"):
        gpack.Model(smol_gpack, device="gpu", gpu_memory="lots")
