#!/usr/bin/env python3
"""Reference chat-template renderings with transformers' apply_chat_template.

Usage: HF_HUB_OFFLINE=1 python testdata/tokenizer/scripts/make_chat_refs.py FIXTURES_DIR [OUT_JSON]
Writes OUT_JSON (default testdata/tokenizer/chat_refs.json): for every fixture tokenizer with
a chat template, every conversation below rendered with add_generation_prompt False and True.
"""
import json
import os
import sys

import transformers
from transformers import AutoTokenizer

FX = sys.argv[1]
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "chat_refs.json")
DIRS = {
    "smollm2": "tokenizers/smollm2-135m-instruct",
    "bpe2048": "tiny/tokenizers/bpe2048",
    "spm2048": "tiny/tokenizers/spm2048",
}
CONVS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."},
     {"role": "user", "content": "And 3+3?"}],
    [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "  padded  \n"},
     {"role": "assistant", "content": "\tok\n"}, {"role": "user", "content": "日本語 😀 \"quotes\" {{ not jinja }}"}],
    [{"role": "user", "content": ""}, {"role": "assistant", "content": "<|im_end|> literal"}],
    [{"role": "user", "content": "line1\nline2\n\nline4"}, {"role": "assistant", "content": "a"},
     {"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}],
]


def main():
    res = {"transformers": transformers.__version__, "conversations": CONVS, "renders": {}}
    for name, d in DIRS.items():
        tok = AutoTokenizer.from_pretrained(os.path.join(FX, d))
        out = []
        for conv in CONVS:
            for agp in (False, True):
                out.append({"add_generation_prompt": agp,
                            "text": tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=agp)})
        res["renders"][name] = out
        print(name, len(out), "renders")
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
