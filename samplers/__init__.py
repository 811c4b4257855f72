"""Token samplers: draw the next token with a properly weighted log weight (see samplers.base).

    direct   exact local distribution; weight = log of the local mass
    awrs     adaptive weighted rejection sampling; checks a few tokens, unbiased weight
    masking  improper local masking (weight 0), a baseline for comparisons only
"""

from __future__ import annotations

from typing import Sequence

from potentials.base import Potential
from samplers.awrs import AWRSSampler
from samplers.base import Draw, TokenSampler, as_draw, categorical
from samplers.direct import DirectSampler
from samplers.masking import MaskingSampler
from samplers.proposal import ProposalSampler
from smc.backends.base import LMBackend

SAMPLERS: dict[str, type[TokenSampler]] = {
    "direct": DirectSampler,
    "awrs": AWRSSampler,
    "masking": MaskingSampler,
}


def make_sampler(
    name: str, lm: LMBackend, potential: Potential | None = None, prompt_ids: Sequence[int] = (),
    **options: int,
) -> TokenSampler:
    """The sampler called ``name`` (one of SAMPLERS) for ``lm``, ``potential``, ``prompt_ids``,
    with its own ``options`` (``SAMPLERS[name].OPTIONS``)."""
    if name not in SAMPLERS:
        raise ValueError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")
    return SAMPLERS[name](lm, potential, prompt_ids, **options)


__all__ = [
    "AWRSSampler",
    "DirectSampler",
    "Draw",
    "MaskingSampler",
    "ProposalSampler",
    "SAMPLERS",
    "TokenSampler",
    "as_draw",
    "categorical",
    "make_sampler",
]
