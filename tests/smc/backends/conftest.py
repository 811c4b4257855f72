"""Backend tests fail on a FutureWarning or DeprecationWarning raised in torch or transformers.

Such a warning means that a call of ours uses an API that a later release removes (as
transformers 5.2x did with ``past_key_values``), so it should fail here on the day it first
appears rather than break a run on the day of the removal. The filter matches the module that
the warning is attributed to (``warnings.warn``'s ``stacklevel``): transformers' own deprecation
decorator points at the caller of ``forward``, which is ``torch.nn.modules.module``.

Warnings that another library's call provokes are not ours to fix and are let through by name
(``THIRD_PARTY``). Tests marked ``vllm`` are left out: vLLM's engine runs torch and transformers code of its own in
the same process, whose warnings are not provoked by our calls.

The HF backend's tests share two fixtures: ``make_lm`` (a fresh HFLM over the embedded model's
weights) and ``reference`` (log-probs of a plain transformers forward).
"""

from pathlib import Path

import pytest
import torch

from smc.backends.hf import HFLM
from smc.backends.loading import load_lm
from smc.backends.mlx import mlx_available

HERE = Path(__file__).resolve().parent
MODULES = r"(torch|transformers)(\..*)?"
#: messages of warnings provoked by other libraries' calls: peft 0.21's PeftModel reads
#: ``model.is_gradient_checkpointing`` (deprecated in transformers 5.2x)
THIRD_PARTY = (r"`is_gradient_checkpointing` is deprecated",)
# Later filters take precedence: errors first, then the third-party exemptions.
FILTERS = (
    *(pytest.mark.filterwarnings(f"error::{category}:{MODULES}")
      for category in ("FutureWarning", "DeprecationWarning")),
    *(pytest.mark.filterwarnings(f"ignore:{message}") for message in THIRD_PARTY),
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE not in Path(item.path).resolve().parents or item.get_closest_marker("vllm"):
            continue
        # Prepended, so that a test's own filterwarnings marks still override these.
        for mark in reversed(FILTERS):
            item.add_marker(mark, append=False)


@pytest.fixture(scope="session")
def embedded_mlx_lm():
    """The embedded model on the MLX backend (``smc.load_lm(backend="mlx")``), loaded once per
    session; skips where MLX does not import."""
    if not mlx_available():
        pytest.skip("MLX is not installed here (mlx.core / mlx_lm do not import): pip install 'smc-steer[mlx-cpu]'")
    return load_lm(backend="mlx")


@pytest.fixture
def make_lm(embedded_lm):
    """A fresh backend (own cache, batcher and counters) over the embedded model's weights."""

    def make(**kwargs) -> HFLM:
        return HFLM(embedded_lm.model, embedded_lm.tokenizer, **kwargs)

    return make


@pytest.fixture
def reference(embedded_lm):
    """log p(. | ids) from one plain, unbatched, uncached transformers forward (float32)."""
    model, V = embedded_lm.model, len(embedded_lm.vocab)
    memo: dict[tuple[int, ...], torch.Tensor] = {}

    @torch.inference_mode()
    def ref(ids):
        key = tuple(ids)
        if key not in memo:
            out = model(torch.tensor([list(key)]), use_cache=False, logits_to_keep=1)
            memo[key] = torch.log_softmax(out.logits[0, -1, :V].double(), dim=-1).float()
        return memo[key]

    return ref
