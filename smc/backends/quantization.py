"""Quantized loading for the HF backend: ``load_lm(name, quantization="8bit" | "4bit")``.

Both go through transformers' ``BitsAndBytesConfig``; bitsandbytes runs them on CUDA and, since
0.46, on CPU (its own int8 and NF4 kernels in plain torch, slower than float32 there: it saves
memory, not time). With W a linear layer's weight and x its input:

    "8bit": W stored as int8 with one absmax scale per output row, x quantized to int8 per
            row (float16 first), W x in integers, rescaled: LLM.int8() without its outlier
            columns (``llm_int8_threshold=0``), so each row's result is independent of the
            rest of the batch and cached rows equal recomputed ones.
    "4bit": W stored as NF4 (4-bit normal-float codes, one absmax scale per block of 64
            weights), multiplied in the compute dtype (the model's dtype; bitsandbytes' packed
            CPU kernel computes in bfloat16).

Embeddings, norms and the output layer stay in the model's dtype. A transformers quantization
config object (e.g. a ``BitsAndBytesConfig`` of one's own, or a ``TorchAoConfig``) is also
accepted and passed on as is.
"""

from __future__ import annotations

import importlib.metadata
import logging
from typing import Any

import torch

QUANTIZATIONS = ("8bit", "4bit")
BNB_MIN_VERSION = "0.46.1"  # the first bitsandbytes release with CPU kernels
INSTALL_HINT = "pip install 'smc-steer[quantization]' (or: pip install 'bitsandbytes>=0.46.1')"


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def bitsandbytes_version() -> str | None:
    """The installed bitsandbytes version, or None."""
    try:
        return importlib.metadata.version("bitsandbytes")
    except importlib.metadata.PackageNotFoundError:
        return None


def _drop_cast_notice(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("MatMul8bitLt: inputs will be cast")


def _require_bitsandbytes(quantization: str) -> None:
    version = bitsandbytes_version()
    if version is None or _version_tuple(version) < _version_tuple(BNB_MIN_VERSION):
        found = "is not installed" if version is None else f"is {version}, too old"
        raise ImportError(
            f"quantization={quantization!r} needs bitsandbytes>={BNB_MIN_VERSION} (CUDA, and CPU "
            f"since 0.46), which {found}: {INSTALL_HINT}"
        )


def check_quantization(quantization: Any) -> None:
    """ValueError/TypeError for a ``quantization`` argument that is none of None, "8bit",
    "4bit" or a transformers quantization config, and ImportError naming the install command
    when "8bit"/"4bit" lack bitsandbytes (checked before any model loads)."""
    if quantization is None:
        return
    if quantization in QUANTIZATIONS:
        _require_bitsandbytes(quantization)
        return
    if isinstance(quantization, str):
        raise ValueError(f"unknown quantization {quantization!r}; choose '8bit' or '4bit' (bitsandbytes)")
    from transformers.utils.quantization_config import QuantizationConfigMixin

    if not isinstance(quantization, QuantizationConfigMixin):
        raise TypeError(
            "quantization must be '8bit', '4bit' or a transformers quantization config "
            f"(e.g. BitsAndBytesConfig), got {type(quantization).__name__}"
        )


def quantization_config(quantization: Any, device: torch.device, dtype: torch.dtype) -> Any:
    """The transformers config for ``quantization`` on ``device`` computing in ``dtype``;
    ImportError naming the install command when bitsandbytes is missing or too old."""
    check_quantization(quantization)
    if quantization is None or not isinstance(quantization, str):
        return quantization
    if device.type not in ("cpu", "cuda"):
        raise ValueError(
            f"quantization={quantization!r} runs on 'cpu' or 'cuda' (bitsandbytes), not {device.type!r}"
        )
    from transformers import BitsAndBytesConfig

    if quantization == "8bit":
        # bitsandbytes logs, on every product, that int8 inputs are cast to float16: expected
        # here, and it would flood the log.
        logging.getLogger("bitsandbytes.autograd._functions").addFilter(_drop_cast_notice)
        # Threshold 0: no outlier columns. LLM.int8's default (6.0) picks the columns computed
        # in 16-bit from the whole batch, so a context's log-probs would depend on its
        # batch-mates (measured: up to 1.06 nats on the embedded model), and a cached row
        # would disagree with a recomputed one. Without them every row is quantized alone.
        return BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)
    return BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype
    )
