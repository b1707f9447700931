"""gpack.Tokenizer: ids equal `gpack tokenize`'s for the same file, and the
Hugging Face references stored in testdata (tokenizers / transformers)."""

import gzip
import json

import pytest

import gpack
from conftest import TESTDATA, run_cli

TRICKY = json.loads((TESTDATA / "tokenizer" / "tricky.json").read_text())
CHAT = json.loads((TESTDATA / "tokenizer" / "chat_refs.json").read_text())
EXTRA = ["Hello world", "<|im_start|>user\nHi<|im_end|>", "", "-n 5 --json", "naïve café 東京 🤖"]


def cli_ids(model, text, workdir, special=True):
    f = workdir / "tok-input.txt"
    f.write_bytes(text.encode("utf-8"))
    args = ["tokenize", model, "--file", f] + ([] if special else ["--no-special"])
    out = run_cli(*args).stdout.split()
    return [int(x) for x in out]


@pytest.fixture(scope="session")
def smol_tokenizer_json(workdir):
    """SmolLM2's tokenizer.json and tokenizer_config.json, unpacked."""
    d = workdir / "smollm2-hf"
    d.mkdir(exist_ok=True)
    for n in ("tokenizer.json", "tokenizer_config.json"):
        (d / n).write_bytes(gzip.decompress((TESTDATA / "tokenizer" / "smollm2" / f"{n}.gz").read_bytes()))
    return d / "tokenizer.json"


def test_ids_equal_cli_for_gpack(smol_gpack, workdir):
    tok = gpack.Tokenizer(smol_gpack)
    for s in TRICKY["strings"] + EXTRA:
        assert tok.encode(s) == cli_ids(smol_gpack, s, workdir), repr(s)
    for s in EXTRA:
        assert tok.encode(s, add_special=False) == cli_ids(smol_gpack, s, workdir, special=False), repr(s)


@pytest.mark.parametrize("source", ["gguf", "tokenizer.json"])
def test_ids_equal_cli_for_other_sources(source, smol_gguf, smol_tokenizer_json, workdir):
    path = smol_gguf if source == "gguf" else smol_tokenizer_json
    tok = gpack.Tokenizer(path)
    for s in TRICKY["strings"][:12] + EXTRA:
        assert tok.encode(s) == cli_ids(path, s, workdir), repr(s)


def test_ids_and_text_equal_hf_tokenizers(smol_gpack):
    tok = gpack.Tokenizer(smol_gpack)
    for r in TRICKY["results"]["smollm2-135m-instruct"]:
        assert tok.encode(r["text"]) == r["ids_with_special"], repr(r["text"])
        assert tok.decode(r["ids"]) == r["decoded"], repr(r["text"])


def test_chat_template_equals_transformers(smol_gpack):
    tok = gpack.Tokenizer(smol_gpack)
    renders = CHAT["renders"]["smollm2"]
    i = 0
    for conv in CHAT["conversations"]:
        for gen in (False, True):
            want = renders[i]
            assert want["add_generation_prompt"] == gen
            assert tok.apply_chat_template(conv, add_generation_prompt=gen) == want["text"]
            i += 1
    assert i == len(renders)
    ids = tok.apply_chat_template(CHAT["conversations"][0], tokenize=True)
    assert ids == tok.encode(renders[1]["text"], add_special=False)


def test_tokenizer_errors(smol_gpack, workdir):
    tok = gpack.Tokenizer(smol_gpack)
    assert tok.vocab_size == len(tok) == 49152
    assert tok.token_to_id("<|im_end|>") == tok.eos_id
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([49152])
    with pytest.raises(OverflowError):
        tok.decode([-1])
    with pytest.raises(TypeError):
        tok.apply_chat_template(["not a dict"])
    with pytest.raises(ValueError, match="role"):
        tok.apply_chat_template([{"content": "x"}])
    with pytest.raises(gpack.GpackError):
        gpack.Tokenizer(workdir / "missing.json")
    junk = workdir / "junk.bin"
    junk.write_bytes(b"\x00" * 64)
    with pytest.raises(gpack.GpackError):
        gpack.Tokenizer(junk)
