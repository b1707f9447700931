#!/usr/bin/env python3
"""Regenerate testdata/tokenizer/ from ../shared/fixtures with the HF `tokenizers` library.

Usage (venv with tokenizers==0.23.3, gguf==0.19.0):
  python testdata/tokenizer/scripts/make_refs.py FIXTURES_DIR [OUT_DIR=testdata/tokenizer]

For every tokenizer NAME it writes OUT_DIR/NAME/:
  tokenizer.json.gz, tokenizer_config.json.gz   copies (gzip, mtime 0)
  corpus_ids.u32le.gz     HF ids of corpus.txt as ONE text, add_special_tokens=False
                          (the fixture file; re-derived here and checked equal)
  lines_ids.u32le.gz      HF ids of every line of corpus.txt.split("\\n"):
                          records [u32 count][count x u32], add_special_tokens=False
  tokenizer.gguf.gz       (where a GGUF exists) the GGUF's tokenizer.* and general.architecture
                          key-values only, no tensors: what TokenizerSpec::from_gguf reads
and OUT_DIR/corpus.txt, OUT_DIR/tricky.json, OUT_DIR/llamacpp_check.json (copies).
"""
import array
import gzip
import hashlib
import json
import os
import shutil
import sys

import tokenizers

FX = sys.argv[1]
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..")
MODELS = os.environ.get("GPACK_MODELS", os.path.expanduser("~/.cache/gpack/models"))

TOKS = {
    # name: (dir with tokenizer.json[.gz] + tokenizer_config.json, gguf or None)
    "smollm2": ("tokenizers/smollm2-135m-instruct", os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")),
    "gemma3": ("tokenizers/gemma-3-270m", None),
    "bpe2048": ("tiny/tokenizers/bpe2048", "tiny/llama/llama-f16.gguf"),
    "spm2048": ("tiny/tokenizers/spm2048", "tiny/gemma3/gemma3-f16.gguf"),
}


def gz_write(path, data):
    with gzip.GzipFile(path, "wb", 9, mtime=0) as f:
        f.write(data)


def u32le(ids):
    a = array.array("I", ids)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def tokenizer_only_gguf(src, dst):
    import gguf
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    for name, f in r.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_key_value(name, f.contents(), vt, sub_type=f.types[-1])
        else:
            w.add_key_value(name, f.contents(), vt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    os.makedirs(OUT, exist_ok=True)
    shutil.copyfile(os.path.join(FX, "corpus.txt"), os.path.join(OUT, "corpus.txt"))
    shutil.copyfile(os.path.join(FX, "tokenizers/tricky.json"), os.path.join(OUT, "tricky.json"))
    shutil.copyfile(os.path.join(FX, "tokenizers/llamacpp_check.json"), os.path.join(OUT, "llamacpp_check.json"))
    corpus = open(os.path.join(OUT, "corpus.txt"), encoding="utf-8").read()
    lines = corpus.split("\n")
    for name, (d, gg) in TOKS.items():
        od = os.path.join(OUT, name)
        os.makedirs(od, exist_ok=True)
        src = os.path.join(FX, d)
        tj = os.path.join(src, "tokenizer.json")
        if os.path.exists(tj):
            raw = open(tj, "rb").read()
        else:
            raw = gzip.open(tj + ".gz").read()
        gz_write(os.path.join(od, "tokenizer.json.gz"), raw)
        gz_write(os.path.join(od, "tokenizer_config.json.gz"), open(os.path.join(src, "tokenizer_config.json"), "rb").read())
        tok = tokenizers.Tokenizer.from_str(raw.decode("utf-8"))
        ids = tok.encode(corpus, add_special_tokens=False).ids
        ref = gzip.open(os.path.join(src, "corpus_ids.u32le.gz")).read()
        assert u32le(ids) == ref, name + ": fixture ids differ from this tokenizers version"
        shutil.copyfile(os.path.join(src, "corpus_ids.u32le.gz"), os.path.join(od, "corpus_ids.u32le.gz"))
        lc = os.path.join(src, "corpus_ids.llamacpp.u32le.gz")
        if os.path.exists(lc):
            shutil.copyfile(lc, os.path.join(od, "corpus_ids.llamacpp.u32le.gz"))
        rec = bytearray()
        for enc in tok.encode_batch(lines, add_special_tokens=False):
            rec += u32le([len(enc.ids)]) + u32le(enc.ids)
        gz_write(os.path.join(od, "lines_ids.u32le.gz"), bytes(rec))
        if gg:
            gp = gg if os.path.isabs(gg) else os.path.join(FX, gg)
            if os.path.exists(gp):
                tmp = os.path.join(od, "tokenizer.gguf")
                tokenizer_only_gguf(gp, tmp)
                gz_write(tmp + ".gz", open(tmp, "rb").read())
                os.remove(tmp)
            else:
                print("  (no GGUF at %s; tokenizer.gguf.gz not refreshed)" % gp)
        print(name, len(ids), "tokens whole;", len(lines), "lines; sha256", hashlib.sha256(u32le(ids)).hexdigest()[:16])


if __name__ == "__main__":
    main()
