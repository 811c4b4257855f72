"""An LM backend whose EOS set also holds every token containing given text (e.g. a newline).

``with_eos(lm, ["\\n"])`` answers exactly what ``lm`` answers; only ``eos_token_ids`` grows by
E' = {t : some s of ``containing`` occurs in the bytes of t}. Generation then stops at such a
token as it stops at EOS, and the token's text is not part of the output. The sampled law is
that of the LM whose end of text is "EOS or any token of E'":

    pi'(x) ∝ p(x) * (sum over e in EOS ∪ E' of p(e | x)) * phi(x),   x free of E' tokens

a different target from ``lm``'s (it is not a speed-up): it is what genlm-eval's pattern-matching
task samples (its model adaptor makes every token with a newline an EOS), for prompts whose
answers end at a line break. Samplers stay exact for it.
"""

from __future__ import annotations

from typing import Any, Iterable

from smc.backends.base import LMBackend, check_backend
from smc.core.errors import InvalidArgument, InvalidArgumentType


class WithEOS:
    """``lm`` with the extra EOS tokens of ``with_eos`` (everything else delegated to ``lm``)."""

    #: an LM backend: shared by particles, never copied or pickled with them
    shared_by_particles = True

    def __init__(self, lm: LMBackend, extra_ids: Iterable[int]):
        self._lm = lm
        self.eos_token_ids = sorted({int(i) for i in lm.eos_token_ids} | {int(i) for i in extra_ids})

    def __getattr__(self, name: str) -> Any:
        if name == "_lm":  # not set yet (e.g. during unpickling): never recurse
            raise AttributeError(name)
        return getattr(self._lm, name)

    def __repr__(self) -> str:
        return f"with_eos({self._lm!r}, {len(self.eos_token_ids)} EOS ids)"


def with_eos(lm: LMBackend, containing: Iterable[str | bytes]) -> WithEOS:
    """``lm`` whose EOS set also holds every token whose bytes contain one of ``containing``.

    Args:
        lm: an LM backend.
        containing: non-empty texts (str, as UTF-8, or bytes), e.g. ``["\\n"]``.

    Raises TypeError for a non-backend or a non-text entry, ValueError for no entries, an empty
    one, or one that no token contains.
    """
    check_backend(lm)
    if isinstance(containing, (str, bytes)):
        raise InvalidArgumentType(f"containing must be a list of texts, e.g. [{containing!r}], not a single text")
    needles = []
    for s in containing:
        if not isinstance(s, (str, bytes)):
            raise InvalidArgumentType(f"containing holds {s!r}; it must hold str or bytes")
        b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
        if not b:
            raise InvalidArgument("containing holds an empty text, which every token contains")
        needles.append(b)
    if not needles:
        raise InvalidArgument("containing is empty: name at least one text, e.g. ['\\n']")
    vocab = [bytes(v) for v in lm.vocab]
    found = {}
    for b in needles:
        ids = [i for i, v in enumerate(vocab) if b in v]
        if not ids:
            raise InvalidArgument(f"no token of the vocabulary contains {b!r}")
        found[b] = ids
    return WithEOS(lm, (i for ids in found.values() for i in ids))
