"""gpack from Python: open a .gpack zero-copy, tokenize, generate, convert, export.

>>> import gpack
>>> with gpack.open("smollm2.gpack") as f:             # quick check (< 1 ms)
...     w = f.tensor("blk.0.attn_norm.weight")         # F32: a view of the mapping
...     e = f.tensor("token_embd.weight")              # Q4_1: dequantized float32
>>> tok = gpack.Tokenizer("smollm2.gpack")
>>> tok.encode("Hello world")
>>> m = gpack.Model("smollm2.gpack")
>>> m.generate("The capital of France is", max_tokens=16)
>>> for piece in m.generate("Once upon a time", stream=True): print(piece, end="")
>>> m.create_chat_completion([{"role": "user", "content": "Hi"}])["choices"][0]["message"]
>>> gpack.convert("smollm2.gguf", "smollm2.gpack")      # `gpack convert`'s JSON report as a dict
>>> gpack.export("smollm2.gpack", "back.gguf")          # `gpack export`'s JSON report as a dict

Every error from the Rust side is raised as :class:`GpackError` with its
message (a damaged section is named). See the stubs (``__init__.pyi``) for
every signature.
"""

from ._gpack import GpackError, File, Tokenizer, Model, Stream, convert, export, __version__

__all__ = ["GpackError", "File", "Tokenizer", "Model", "Stream", "open", "convert", "export", "__version__"]


def open(path, verify="quick"):  # noqa: A001 - the package's entry point, as io.open
    """Map the .gpack at ``path`` and check it; returns a :class:`File`.

    ``verify="quick"`` (default) checks the structure and the manifest digest
    in about a millisecond; ``verify="full"`` also hashes every section and
    raises :class:`GpackError` naming each one that fails. Use it as a context
    manager to close it; arrays it returned stay valid after closing.
    """
    return File(path, verify=verify)
