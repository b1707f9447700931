"""Type stubs for gpack (the native module gpack._gpack and its wrapper)."""

import os
from typing import Any, Dict, Iterator, List, Literal, Optional, Sequence, Tuple, Union, overload

import numpy as np
import numpy.typing as npt

__version__: str

_Path = Union[str, "os.PathLike[str]"]
Message = Dict[str, Any]

class GpackError(Exception):
    """An error from gpack's Rust code, with its message and causes."""

def open(path: _Path, verify: Literal["quick", "full"] = "quick") -> File:
    """Map a .gpack and check it (quick: structure and manifest digest; full: every section's SHA-256)."""

class File:
    """A mapped .gpack. Arrays from tensor()/raw() keep the mapping alive after close()."""

    def __init__(self, path: _Path, verify: Literal["quick", "full"] = "quick") -> None: ...
    @property
    def path(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    @property
    def digest(self) -> str:
        """SHA-256 of the manifest (hex): the file's identity, as `gpack verify` prints it."""
    @property
    def manifest(self) -> Dict[str, Any]: ...
    @property
    def metadata(self) -> Dict[str, Any]:
        """Every metadata key of the source model (GGUF names)."""
    @property
    def sections(self) -> List[Dict[str, Any]]:
        """name, kind, offset, size, alignment, item_count, sha256 of each section, in file order."""
    @property
    def tensors(self) -> Dict[str, Dict[str, Any]]:
        """name -> type, layout, shape (NumPy order), section, offset, size, view."""
    @property
    def mapping(self) -> Tuple[int, int]:
        """(address, length) of the file's mapping in this process."""
    def tensor(self, name: str) -> npt.NDArray[Union[np.float32, np.float16]]:
        """F32/F16: a read-only view of the mapping; BF16 and quantized types: dequantized float32."""
    def raw(self, name: str) -> npt.NDArray[np.uint8]:
        """The stored bytes of a tensor (zero-copy, read-only)."""
    def verify(self) -> None:
        """Hash every section; raises GpackError naming each one that fails."""
    def close(self) -> None: ...
    def __enter__(self) -> File: ...
    def __exit__(self, *args: object) -> bool: ...
    def __contains__(self, name: str) -> bool: ...
    def __len__(self) -> int: ...

class Tokenizer:
    """The tokenizer of a .gpack, .gguf, tokenizer.json, Hugging Face directory or GBT1 file."""

    def __init__(self, path: _Path) -> None: ...
    @property
    def path(self) -> str: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def bos_id(self) -> Optional[int]: ...
    @property
    def eos_id(self) -> Optional[int]: ...
    @property
    def chat_template(self) -> Optional[str]: ...
    def encode(self, text: str, add_special: bool = True) -> List[int]: ...
    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str: ...
    def token_bytes(self, id: int) -> bytes: ...
    def token_to_id(self, text: str) -> Optional[int]: ...
    @overload
    def apply_chat_template(
        self, messages: List[Message], add_generation_prompt: bool = True, tokenize: Literal[False] = False
    ) -> str: ...
    @overload
    def apply_chat_template(
        self, messages: List[Message], add_generation_prompt: bool = True, *, tokenize: Literal[True]
    ) -> List[int]: ...
    def __len__(self) -> int: ...

class Stream:
    """An iterator over a generation running on another thread; close() or dropping it stops it."""

    def __iter__(self) -> Stream: ...
    def __next__(self) -> Any: ...
    def close(self) -> None: ...

class Model:
    """A model loaded as `gpack run` loads it (.gpack mapped in place, .gguf / HF dir transcoded, .giw)."""

    def __init__(
        self,
        path: _Path,
        *,
        n_ctx: int = 2048,
        kv: Literal["f16", "f32", "q8_0", "q4_0"] = "f16",
        kv_k: Optional[Literal["f16", "f32", "q8_0", "q4_0"]] = None,
        kv_v: Optional[Literal["f16", "f32", "q8_0", "q4_0"]] = None,
        kv_f16: Optional[bool] = None,
        verify: Literal["background", "before", "off"] = "background",
        fallback_gguf: Optional[_Path] = None,
        expert_mmap: bool = False,
        expert_cache_bytes: Optional[int] = None,
        threads: Optional[int] = None,
        device: str = "auto",
        gpu_layers: Optional[int] = None,
        gpu_memory: Optional[Union[int, str]] = None,
        kv_cache_bytes: int = 0,
        kv_cache_dir: Optional[_Path] = None,
        kv_cache_disk_bytes: Optional[int] = None,
    ) -> None: ...
    @property
    def path(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def n_ctx(self) -> int: ...
    @property
    def arch(self) -> str: ...
    def tokenize(self, text: str, add_special: bool = True) -> List[int]: ...
    def detokenize(self, ids: Sequence[int]) -> str: ...
    @overload
    def generate(
        self,
        prompt: Union[str, Sequence[int]],
        max_tokens: int = 128,
        *,
        temperature: float = 0.0,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.0,
        repeat_penalty: float = 1.0,
        repeat_last_n: int = 64,
        seed: int = 42,
        stop: Optional[List[str]] = None,
        ignore_eos: bool = False,
        stream: Literal[False] = False,
        speculative: Literal["ngram", "mtp", "none"] = "ngram",
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        json_schema: Union[None, str, Dict[str, Any]] = None,
        grammar: Optional[str] = None,
    ) -> str: ...
    @overload
    def generate(
        self,
        prompt: Union[str, Sequence[int]],
        max_tokens: int = 128,
        *,
        temperature: float = 0.0,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.0,
        repeat_penalty: float = 1.0,
        repeat_last_n: int = 64,
        seed: int = 42,
        stop: Optional[List[str]] = None,
        ignore_eos: bool = False,
        stream: Literal[True],
        speculative: Literal["ngram", "mtp", "none"] = "ngram",
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        json_schema: Union[None, str, Dict[str, Any]] = None,
        grammar: Optional[str] = None,
    ) -> Iterator[str]: ...
    def generate_ids(
        self,
        prompt: Union[str, Sequence[int]],
        max_tokens: int = 128,
        *,
        temperature: float = 0.0,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.0,
        seed: int = 42,
        stop: Optional[List[str]] = None,
        speculative: Literal["ngram", "mtp", "none"] = "ngram",
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        logprobs: Optional[int] = None,
        json_schema: Union[None, str, Dict[str, Any]] = None,
        grammar: Optional[str] = None,
    ) -> Dict[str, Any]:
        """text, tokens, finish_reason, prompt_tokens, cached_tokens, prefill_tps, decode_tps,
        drafted, accepted (speculative decoding's draft tokens), logprobs
        (with logprobs=N: per token {"token", "logprob", "top": [[id, lp], ...]})."""
    @overload
    def create_chat_completion(
        self,
        messages: List[Message],
        *,
        max_tokens: Optional[int] = None,
        temperature: Optional[float] = None,
        top_p: Optional[float] = None,
        top_k: Optional[int] = None,
        min_p: Optional[float] = None,
        seed: Optional[int] = None,
        stop: Union[None, str, List[str]] = None,
        stream: Literal[False] = False,
        stream_options: Optional[Dict[str, Any]] = None,
        speculative: Literal["ngram", "mtp", "none"] = "ngram",
        presence_penalty: Optional[float] = None,
        frequency_penalty: Optional[float] = None,
        response_format: Optional[Dict[str, Any]] = None,
        logprobs: Optional[bool] = None,
        top_logprobs: Optional[int] = None,
    ) -> Dict[str, Any]: ...
    @overload
    def create_chat_completion(
        self,
        messages: List[Message],
        *,
        max_tokens: Optional[int] = None,
        temperature: Optional[float] = None,
        top_p: Optional[float] = None,
        top_k: Optional[int] = None,
        min_p: Optional[float] = None,
        seed: Optional[int] = None,
        stop: Union[None, str, List[str]] = None,
        stream: Literal[True],
        stream_options: Optional[Dict[str, Any]] = None,
        speculative: Literal["ngram", "mtp", "none"] = "ngram",
        presence_penalty: Optional[float] = None,
        frequency_penalty: Optional[float] = None,
        response_format: Optional[Dict[str, Any]] = None,
        logprobs: Optional[bool] = None,
        top_logprobs: Optional[int] = None,
    ) -> Iterator[Dict[str, Any]]: ...

def convert(
    src: _Path,
    out: _Path,
    *,
    quant: str = "keep",
    name: Optional[str] = None,
    external_experts: bool = False,
    force: bool = False,
    mtp_dir: Optional[_Path] = None,
    draft: Optional[_Path] = None,
    allow_requantize: bool = False,
    imatrix: Optional[_Path] = None,
) -> Dict[str, Any]:
    """`gpack convert` as a function; returns its JSON report as a dict.

    ``quant``: ``"keep"``, llama-quantize's types and mixes (``"Q4_K_M"``,
    ``"Q8_0"``, ``"IQ4_XS"``, ...) or gpack's ``"int8"``, ``"int8int8"``,
    ``"int4"``. ``imatrix``: an importance matrix (GGUF or legacy .dat, from
    ``gpack imatrix`` or llama-imatrix), as ``gpack convert --imatrix``.
    ``allow_requantize``: quantize an already-quantized source."""

def export(src: _Path, out: _Path, *, force: bool = False) -> Dict[str, Any]:
    """`gpack export` as a function: the .gpack `src` back to the GGUF `out`.

    Every metadata key of the source comes back in its order with its value;
    tensors stored exactly are written in their ggml type, byte for byte, so a
    .gpack converted with ``quant="keep"`` gives back every source tensor bit
    for bit (in name order). Tensors whose layout has no ggml type (the
    int8/int4 transcodes of ``quant="int8"|"int4"``) are written as F32
    values, the ones gpack computes from them. MoE models are not exported
    yet. ``out`` is written through a temporary file and renamed into place
    (nothing is left at ``out`` on failure); an existing ``out`` is replaced
    only with ``force=True``, else :class:`GpackError` is raised ("already
    exists") before ``src`` is read. Runs without holding the GIL.

    Returns ``gpack export --json``'s report as a dict: ``schema``
    (``"gpack.export.v1"``), ``output``, ``size`` (bytes), ``metadata_keys``,
    ``tensors`` (counts), ``dequantized_to_f32`` (names of the tensors written
    as F32) and ``seconds``. Errors (a missing or corrupt ``src``, an
    unsupported model) are :class:`GpackError` with the Rust message, which
    names ``src`` and ``out``.
    """
