"""LoRA adapters on the HF backend: loading them with PEFT, and the backend view of one.

With adapter a loaded, the model computes, per linear layer W it targets,

    h = W x + (alpha / r) * B_a A_a x

and ``lm.adapter(a)`` answers log p_a(. | ids), the log-probs of that model, while ``lm`` keeps
answering log p_base(. | ids). Both are *sources* of one HFLM: each has its own prefix trie
(key/value states and log-prob rows depend on the adapter, so they are never shared), while
the batcher, the model and the counters are shared. A forward pass may carry rows of several
sources; PEFT's mixed-batch inference (``adapter_names``, one name per row, ``"__base__"`` for
the base model) adds to each row only its own adapter's LoRA term.

Only plain LoRA adapters (PEFT type LORA, without DoRA) are accepted: they are the ones whose
mixed-batch inference PEFT supports, and they change neither the vocabulary nor the shape of
the key/value states.
"""

from __future__ import annotations

import importlib.util
import json
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from smc.backends.base import AsyncLM, NextTokenDists
from smc.backends.prompts import TokenizerPrompts

#: PEFT's name for "no adapter" in a mixed batch
BASE_ADAPTER = "__base__"
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_LORA_PREFIX = "lora_"
INSTALL_HINT = "pip install 'smc-steer[adapters]' (or: pip install peft)"


class Source:
    """One source of log-probs of an HFLM: the base model or one loaded adapter.

    ``peft_name`` is the name passed to PEFT for its rows, ``trie`` its own cache, and ``live``
    turns False for good when the adapter is unloaded (identity, not the name, tells sources
    apart: an adapter reloaded under the same name is a new source with an empty cache).
    """

    __slots__ = ("peft_name", "trie", "live", "view")

    def __init__(self, peft_name: str, trie: Any):
        self.peft_name = peft_name
        self.trie = trie
        self.live = True
        self.view: AdapterView | None = None

    def check_live(self) -> None:
        if not self.live:
            raise RuntimeError(
                f"adapter {self.peft_name!r} was unloaded; this view no longer answers "
                "(load it again and use the new lm.adapter(name))"
            )


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name == BASE_ADAPTER:
        raise ValueError(
            f"adapter name must be 1-64 letters, digits, '_' or '-' (and not {BASE_ADAPTER!r}), got {name!r}"
        )
    if name in _LORA_PREFIX:
        # PEFT finds an adapter's weights by key; a name inside "lora_" can match the wrong ones.
        raise ValueError(f"adapter name {name!r} is part of PEFT's prefix {_LORA_PREFIX!r}; choose another")
    return name


def _adapter_config(path_or_hub_id: str) -> dict[str, Any]:
    """The adapter's configuration (adapter_config.json), local or from the Hub; ValueError
    when it cannot be read or is not a plain LoRA adapter."""
    from peft import PeftConfig

    path = Path(path_or_hub_id).expanduser()
    if path.is_dir():
        file = path / "adapter_config.json"
        if not file.is_file():
            inside = sorted(p.parent.name for p in path.glob("*/adapter_config.json"))
            hint = f" (it has adapters in subfolders: {', '.join(inside)})" if inside else ""
            raise ValueError(
                f"{path_or_hub_id!r} has no adapter_config.json{hint}: pass a directory written by a "
                "PEFT model's save_pretrained (an adapter not named 'default' is saved in a subfolder "
                "named after it), or a Hub id of one"
            )
        config = json.loads(file.read_text())
    else:
        try:
            config = PeftConfig.from_pretrained(path_or_hub_id).to_dict()
        except Exception as e:  # noqa: BLE001 - any failure means: no adapter there
            raise ValueError(
                f"cannot load adapter {path_or_hub_id!r}: not a local directory, and the Hugging Face "
                f"Hub has no such adapter or cannot be reached (offline?). Cause: {e}"
            ) from None
    kind = str(config.get("peft_type", "")).upper()
    if kind != "LORA":
        raise ValueError(
            f"adapter {path_or_hub_id!r} is of PEFT type {config.get('peft_type')!r}; only LoRA "
            "adapters are supported (their mixed-batch inference keeps the key/value cache exact)"
        )
    if config.get("use_dora"):
        raise ValueError(
            f"adapter {path_or_hub_id!r} uses DoRA, which PEFT cannot mix with other adapters in "
            "one batch; only plain LoRA adapters are supported"
        )
    return config


class LoraRouter:
    """The PEFT side of an HFLM's adapters: loads and deletes them, and routes batch rows.

    PEFT injects LoRA branches into ``model`` in place. No adapter is ever left active, so a
    plain ``model(...)`` call computes the base model. Inside ``with router.rows(names)``, a
    forward pre-hook on every LoRA layer passes ``adapter_names=names`` (PEFT's mixed-batch
    inference), so row b gets adapter ``names[b]`` (``"__base__"``: none).
    """

    def __init__(self, model: Any):
        self.model = model
        self.peft_model: Any = None
        self._names: list[str] | None = None
        self._hooked: set[int] = set()

    def load(self, path_or_hub_id: Any, name: str) -> None:
        """Load the LoRA adapter at ``path_or_hub_id`` (a local directory or a Hub id) as ``name``."""
        _check_name(name)
        if importlib.util.find_spec("peft") is None:
            raise ImportError(f"LoRA adapters need PEFT, which is not installed: {INSTALL_HINT}")
        if not isinstance(path_or_hub_id, (str, Path)) or not str(path_or_hub_id).strip():
            raise ValueError(f"adapter location must be a directory or a Hub id, got {path_or_hub_id!r}")
        source = str(path_or_hub_id)
        _adapter_config(source)
        from peft import PeftModel

        try:
            if self.peft_model is None:
                self.peft_model = PeftModel.from_pretrained(
                    self.model, source, adapter_name=name, is_trainable=False
                )
            else:
                self.peft_model.load_adapter(source, adapter_name=name, is_trainable=False)
        except (OSError, ValueError, RuntimeError, KeyError) as e:
            raise ValueError(f"cannot load adapter {source!r} onto this model: {e}") from e
        self.peft_model.eval()
        self._deactivate()
        self._hook_new_layers()

    def unload(self, name: str) -> None:
        """Delete adapter ``name`` from the model (its LoRA weights are freed)."""
        self.peft_model.delete_adapter(name)
        self._deactivate()

    @contextmanager
    def rows(self, names: list[str]) -> Iterator[None]:
        """Forward passes inside run row b with adapter ``names[b]``."""
        self._names = names
        try:
            yield
        finally:
            self._names = None

    def _deactivate(self) -> None:
        # PEFT activates the loaded adapter, or a remaining one when one is deleted.
        from peft.tuners.tuners_utils import set_adapter

        set_adapter(self.model, [], inference_mode=True)

    def _hook_new_layers(self) -> None:
        from peft.tuners.lora import LoraLayer
        from peft.utils import AuxiliaryTrainingWrapper

        for module in self.model.modules():
            if isinstance(module, (LoraLayer, AuxiliaryTrainingWrapper)) and id(module) not in self._hooked:
                module.register_forward_pre_hook(self._pass_names, with_kwargs=True)
                self._hooked.add(id(module))

    def _pass_names(self, module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if self._names is not None:
            kwargs["adapter_names"] = self._names
        return args, kwargs


class AdapterView(TokenizerPrompts, AsyncLM):
    """An HFLM seen through one of its loaded adapters: the backend protocol (``vocab``,
    ``eos_token_ids``, ``encode``, ``encode_chat``, ``next_token_logprobs``,
    ``batch_next_token_logprobs``, ``batch_next_token_dists``) with

        next_token_logprobs(ids) = log p_a(. | ids)

    Requests go to the parent's batcher, so they share forward passes with the base model's
    and other adapters' requests. ``stats`` is the parent's dict: counters count the traffic
    of the base model and all its adapters together. The cache is the view's own.
    """

    def __init__(self, parent: Any, source: Source):
        self._parent = parent
        self._source = source
        self.tokenizer = parent.tokenizer
        self.vocab = parent.vocab
        self.eos_token_ids = parent.eos_token_ids
        self.special_token_ids = parent.special_token_ids
        self.max_context = parent.max_context
        self.stats = parent.stats
        self.model = parent.model
        self.device = parent.device
        self.dtype = parent.dtype

    @property
    def name(self) -> str:
        return self._source.peft_name

    @property
    def base(self) -> Any:
        """The HFLM this view belongs to (which itself answers for the base model)."""
        return self._parent

    @property
    def trie(self) -> Any:
        """This adapter's cache (states and log-prob rows of the adapted model only)."""
        return self._source.trie

    def __repr__(self) -> str:
        state = "" if self._source.live else ", unloaded"
        return f"AdapterView({self.name!r}{state})"

    async def _next_token_logprobs(self, ids: tuple[int, ...]):
        return await self._parent._score(self._source, ids)

    async def batch_next_token_dists(self, batch: Sequence[Sequence[int]]) -> NextTokenDists:
        """NextTokenDists of every context under this adapter (see HFLM.batch_next_token_dists)."""
        return self._parent._dists(self._source, [self.check_ids(ids) for ids in batch])

    def clear_cache(self) -> None:
        """Forget this adapter's cached states and rows."""
        self._source.trie.clear()
