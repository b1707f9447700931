#!/usr/bin/env python3
"""Writes the committed seed corpus fuzz/corpus/<target>/ from testdata/.

Usage: python3 fuzz/make_corpus.py GPACK_BIN
  GPACK_BIN: a built `gpack` CLI (converts the cut-down GGUF into a .gpack).
Needs the `gguf` package (testdata/scripts/requirements-lock.txt pins it).

Every seed is a small real file: the tiny llama fixture (testdata/tiny/llama)
cut to one layer and a 320-token vocabulary (GGUF, then converted by gpack
itself: .gpack; its TokenizerBin section: GBT1), its tokenizer.json cut to
the same vocabulary, a safetensors file of a few of its tensors, request
bodies like the server tests', and one .giw bundle of testdata/giw.
"""
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TINY = os.path.join(ROOT, "testdata/tiny/llama")
OUT = os.path.join(ROOT, "fuzz/corpus")
V = 320  # 3 specials + 256 byte tokens + the first merges


def out(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def cut_gguf(src, dst):
    r = GGUFReader(src)
    tokens = [bytes(r.fields["tokenizer.ggml.tokens"].parts[i]).decode()
              for i in r.fields["tokenizer.ggml.tokens"].data][:V]
    keep = set(tokens)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(dst, arch)
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == GGUFValueType.ARRAY else None
        val = f.contents()
        if f.name == f"{arch}.block_count":
            val = 1
        elif f.name == f"{arch}.vocab_size":
            val = V
        elif f.name == "tokenizer.ggml.merges":
            val = [m for m in val
                   if all(p in keep for p in m.split(" ")) and m.replace(" ", "") in keep]
        elif f.name.startswith("tokenizer.ggml.") and vtype == GGUFValueType.ARRAY \
                and len(val) > V:
            val = val[:V]
        w.add_key_value(f.name, val, vtype, sub_type=sub)
    for t in r.tensors:
        if t.name.startswith("blk.") and not t.name.startswith("blk.0."):
            continue
        data = np.asarray(t.data)
        if t.name in ("token_embd.weight", "output.weight"):
            data = data[:V]
        w.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def section(gpack, kind):
    """The payload of the first section of `kind` in a .gpack (raw.rs layout)."""
    count, table = struct.unpack_from("<IQ", gpack, 12)
    for i in range(count):
        k, _, off, size = struct.unpack_from("<IIQQ", gpack, table + 96 * i)
        if k == kind:
            return gpack[off:off + size]
    raise SystemExit(f"no section of kind {kind}")


def cut_tokenizer_json(src):
    j = json.loads(gzip.open(src).read() if src.endswith(".gz") else open(src, "rb").read())
    m = j["model"]
    vocab = {t: i for t, i in m["vocab"].items() if i < V}
    m["vocab"] = vocab
    merges = []
    for mg in m["merges"]:
        a, b = mg if isinstance(mg, list) else mg.split(" ", 1)
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(mg)
    m["merges"] = merges
    j["added_tokens"] = [t for t in j.get("added_tokens", []) if t["id"] < V]
    return json.dumps(j, ensure_ascii=False, separators=(",", ":")).encode()


def main():
    gpack_bin = sys.argv[1]
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    with tempfile.TemporaryDirectory() as tmp:
        g = os.path.join(tmp, "llama-1l-v320-q8_0.gguf")
        cut_gguf(os.path.join(TINY, "llama-q8_0.gguf"), g)
        gg = open(g, "rb").read()
        out("ingest_gguf", "llama-1l-v320-q8_0.gguf", gg)
        p = os.path.join(tmp, "llama.gpack")
        subprocess.run([gpack_bin, "convert", g, "-o", p], check=True,
                       stdout=subprocess.DEVNULL)
        gp = open(p, "rb").read()
        out("runtime_gpack", "llama-1l-v320-q8_0.gpack", gp)
        out("format_gpack", "llama-1l-v320-q8_0.gpack", gp)
        out("tokenizer_gbt1", "llama-v320.gbt1", section(gp, 11))
    # safetensors: three real tensors of the tiny llama, header + data.
    st = open(os.path.join(TINY, "hf/model.safetensors"), "rb").read()
    (n,) = struct.unpack_from("<Q", st, 0)
    head = json.loads(st[8:8 + n])
    names = ["model.norm.weight", "model.layers.0.input_layernorm.weight",
             "model.layers.0.self_attn.k_proj.weight"]
    new, data = {}, b""
    for name in names:
        a, b = head[name]["data_offsets"]
        blob = st[8 + n + a:8 + n + b]
        new[name] = dict(head[name], data_offsets=[len(data), len(data) + len(blob)])
        data += blob
    h = json.dumps(new, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    out("ingest_safetensors", "llama-3-tensors.safetensors", struct.pack("<Q", len(h)) + h + data)
    # tokenizer.json (+ NUL + tokenizer_config.json): byte-level BPE and SentencePiece.
    cfg = open(os.path.join(TINY, "hf/tokenizer_config.json"), "rb").read()
    out("tokenizer_hf", "llama-v320.json",
        cut_tokenizer_json(os.path.join(TINY, "hf/tokenizer.json")) + b"\0" + cfg)
    out("tokenizer_hf", "spm-v320.json",
        cut_tokenizer_json(os.path.join(ROOT, "testdata/tokenizer/spm2048/tokenizer.json.gz")))
    # Request bodies: first byte 0 = chat, 1 = completions.
    bodies = [
        (0, {"model": "smollm2", "messages": [{"role": "system", "content": "Be brief."},
             {"role": "user", "content": "What is the capital of France?"}],
             "max_tokens": 8, "temperature": 0, "stop": ["\n", "."], "seed": 7}),
        (0, {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
             {"type": "text", "text": "b"}]}, {"role": "assistant", "content": None}],
             "stream": True, "stream_options": {"include_usage": True}, "top_p": 0.9,
             "top_k": 0, "min_p": 0.1, "n": 1, "max_completion_tokens": 3}),
        (1, {"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}),
        (1, {"prompt": [1, 2, 300, 4], "max_tokens": 2, "stop": "x"}),
        (1, {"prompt": ["Hello"], "stream": True}),
    ]
    for i, (k, b) in enumerate(bodies):
        out("server_request", f"body{i}.json", bytes([k]) + json.dumps(b).encode())
    out("format_giw", "llama-int4.cpu.v12.giw",
        open(os.path.join(ROOT, "testdata/giw/llama-int4.cpu.v12.giw"), "rb").read())


main()
