#!/usr/bin/env python3
"""llama.cpp reference ids for the real SmolLM2 GGUF, with llama-tokenize.

Usage: python testdata/tokenizer/scripts/make_llamacpp_ids.py LLAMA_BIN_DIR GGUF [OUT_DIR=testdata/tokenizer/smollm2]

Runs `llama-tokenize -m GGUF -f corpus.txt --ids --no-escape --log-disable --no-bos` on the
whole corpus (one text; special-token text is parsed, as `llama_tokenize(..., parse_special=true)`)
and writes OUT_DIR/corpus_ids.llamacpp.u32le.gz (gzip of little-endian u32, mtime 0).
"""
import array
import gzip
import os
import subprocess
import sys

bin_dir, gguf = sys.argv[1], sys.argv[2]
here = os.path.dirname(os.path.abspath(__file__))
out_dir = sys.argv[3] if len(sys.argv) > 3 else os.path.join(here, "..", "smollm2")
corpus = os.path.join(here, "..", "corpus.txt")
exe = os.path.join(bin_dir, "llama-tokenize")
help_text = subprocess.run([exe, "--help"], capture_output=True, text=True).stdout + \
    subprocess.run([exe, "--help"], capture_output=True, text=True).stderr
cmd = [exe, "-m", gguf, "-f", corpus, "--ids", "--log-disable"]
for opt in ("--no-escape", "--no-bos"):
    if opt in help_text:
        cmd.append(opt)
p = subprocess.run(cmd, capture_output=True, text=True, check=True)
line = [l for l in p.stdout.splitlines() if l.startswith("[")][-1]
ids = [int(x) for x in line.strip("[] \n").split(",") if x.strip()]
a = array.array("I", ids)
if sys.byteorder != "little":
    a.byteswap()
os.makedirs(out_dir, exist_ok=True)
with gzip.GzipFile(os.path.join(out_dir, "corpus_ids.llamacpp.u32le.gz"), "wb", 9, mtime=0) as f:
    f.write(a.tobytes())
print(len(ids), "ids;", " ".join(cmd))
