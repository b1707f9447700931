#!/usr/bin/env python3
"""llama.cpp reference ids for the real SmolLM2 GGUF, with llama-tokenize.

Usage: python testdata/tokenizer/scripts/make_llamacpp_ids.py LLAMA_BIN_DIR GGUF [OUT_DIR=testdata/tokenizer/smollm2]
       [--check NAME=GGUF ...]

Runs `llama-tokenize -m GGUF -f corpus.txt --ids --no-escape --log-disable --no-bos` on the
whole corpus (one text; special-token text is parsed, as `llama_tokenize(..., parse_special=true)`)
and writes OUT_DIR/corpus_ids.llamacpp.u32le.gz (gzip of little-endian u32, mtime 0).
With --check NAME=GGUF (e.g. bpe2048=../shared/fixtures/tiny/llama/llama-f16.gguf), the
llama.cpp ids of that GGUF are compared with testdata/tokenizer/NAME/corpus_ids.u32le.gz
(HF) and the result printed; nothing is written for them.
"""
import array
import gzip
import os
import subprocess
import sys

args = sys.argv[1:]
checks = []
while "--check" in args:
    i = args.index("--check")
    checks.append(args[i + 1].split("=", 1))
    del args[i:i + 2]
bin_dir, gguf = args[0], args[1]
here = os.path.dirname(os.path.abspath(__file__))
out_dir = args[2] if len(args) > 2 else os.path.join(here, "..", "smollm2")
corpus = os.path.join(here, "..", "corpus.txt")
exe = os.path.join(bin_dir, "llama-tokenize")
help_text = subprocess.run([exe, "--help"], capture_output=True, text=True).stdout + \
    subprocess.run([exe, "--help"], capture_output=True, text=True).stderr


def tokenize(model):
    cmd = [exe, "-m", model, "-f", corpus, "--ids", "--log-disable"]
    for opt in ("--no-escape", "--no-bos"):
        if opt in help_text:
            cmd.append(opt)
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    line = [l for l in p.stdout.splitlines() if l.startswith("[")][-1]
    ids = [int(x) for x in line.strip("[] \n").split(",") if x.strip()]
    a = array.array("I", ids)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes(), cmd


raw, cmd = tokenize(gguf)
os.makedirs(out_dir, exist_ok=True)
with gzip.GzipFile(os.path.join(out_dir, "corpus_ids.llamacpp.u32le.gz"), "wb", 9, mtime=0) as f:
    f.write(raw)
print(len(raw) // 4, "ids;", " ".join(cmd))
for name, model in checks:
    raw, _ = tokenize(model)
    hf = gzip.open(os.path.join(here, "..", name, "corpus_ids.u32le.gz")).read()
    print(name, "llama.cpp == HF on the whole corpus:", raw == hf, len(raw) // 4, len(hf) // 4)
