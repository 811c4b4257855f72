"""An LM vocabulary's tables, built once per LM and shared by every potential lifted to it.

``VocabTrie``: the byte trie of a set of tokens (a node per distinct byte run, the tokens that
end there), which lifting walks from a byte state, skipping every subtree whose shared bytes
already kill it. ``per_lm``: the cache that keeps such tables per LM object (weakly: a table
lives as long as its LM). The byte-level summaries (``flat_vocab``, ``last_bytes``,
``stop_tokens``) answer per-token questions in one vectorized operation.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

if TYPE_CHECKING:  # annotations only: potentials need nothing of smc at run time
    from smc.backends.base import LMBackend

#: trie nodes with at least this many children are descended through ``next_bytes``
FANOUT = 16


class VocabTrie:
    """Path-compressed trie of the token byte strings: node k has an edge label (bytes), its
    children, and the token ids whose bytes end exactly at k. Node 0 is the root."""

    def __init__(self, vocab: Sequence[bytes], skip: set[int]):
        nested: dict = {}
        for i, tok in enumerate(vocab):
            if i in skip:
                continue
            node = nested
            for b in tok:
                node = node.setdefault(b, {})
            node.setdefault(None, []).append(i)
        self.label: list[bytes] = []
        self.children: list = []
        self.tokens: list = []
        self._add(b"", nested)
        # tuples of ints, which CPython's collector stops tracking: with lists, a 128k-token
        # vocabulary's trie kept ~400,000 containers that every full collection walked (~0.2 s)
        self.children = [tuple(c) for c in self.children]
        self.tokens = [tuple(t) for t in self.tokens]
        # nodes with many children, by their children's first bytes, so that a walk can visit
        # only the children a potential's next_bytes allows (dicts of ints stay untracked too)
        self.by_first: dict[int, dict[int, int]] = {
            k: {self.label[c][0]: c for c in kids}
            for k, kids in enumerate(self.children) if len(kids) >= FANOUT}

    def _add(self, label: bytes, node: dict) -> int:
        # iterative to stay clear of the recursion limit on long tokens
        root = self._new(label, node)
        stack = [(root, node)]
        while stack:
            k, node = stack.pop()
            for b, sub in node.items():
                if b is None:
                    continue
                lab = bytes((b,))
                while len(sub) == 1 and None not in sub:  # compress unary chains
                    (b2, sub), = sub.items()
                    lab += bytes((b2,))
                child = self._new(lab, sub)
                self.children[k].append(child)
                stack.append((child, sub))
        return root

    def _new(self, label: bytes, node: dict) -> int:
        self.label.append(label)
        self.children.append([])
        self.tokens.append(list(node.get(None, ())))
        return len(self.label) - 1

    def __len__(self) -> int:
        return len(self.label)


_PER_LM: "weakref.WeakKeyDictionary[Any, dict[tuple, Any]]" = weakref.WeakKeyDictionary()


def per_lm(lm: LMBackend, key: tuple, build: Callable[[], Any]) -> Any:
    """``build()``, computed once per LM and key (the vocabulary's tables outlive potentials)."""
    key = (len(lm.vocab), *key)
    try:
        tables = _PER_LM.setdefault(lm, {})
    except TypeError:  # an LM object that cannot be weakly referenced: no sharing
        return build()
    got = tables.get(key)
    if got is None:
        got = tables[key] = build()
    return got


def vocab_trie(lm: LMBackend, skip: set[int]) -> VocabTrie:
    """The trie of ``lm``'s vocabulary without the ``skip`` ids, built once per LM and skip set."""
    return per_lm(lm, ("trie", tuple(sorted(skip))), lambda: VocabTrie(lm.vocab, skip))


def flat_vocab(lm: LMBackend) -> tuple[np.ndarray, np.ndarray]:
    """(every token's bytes concatenated, as uint8; each token's length), built once per LM."""

    def build() -> tuple[np.ndarray, np.ndarray]:
        toks = [bytes(t) for t in lm.vocab]
        return (np.frombuffer(b"".join(toks), dtype=np.uint8),
                np.fromiter(map(len, toks), dtype=np.int64, count=len(toks)))

    return per_lm(lm, ("flat",), build)


def last_bytes(lm: LMBackend) -> np.ndarray:
    """Each token's last byte (-1 for a token with no bytes), built once per LM."""

    def build() -> np.ndarray:
        buf, lens = flat_vocab(lm)
        out = np.full(len(lens), -1, dtype=np.int16)
        some = lens > 0
        out[some] = buf[np.cumsum(lens)[some] - 1]
        return out

    return per_lm(lm, ("last",), build)


def stop_tokens(lm: LMBackend, stop: bytes) -> np.ndarray:
    """Which tokens contain a byte of ``stop``, built once per LM and stop bytes."""

    def build() -> np.ndarray:
        buf, lens = flat_vocab(lm)
        owner = np.repeat(np.arange(len(lens)), lens)
        out = np.zeros(len(lens), dtype=bool)
        out[owner[np.isin(buf, np.frombuffer(bytes(stop), dtype=np.uint8))]] = True
        return out

    return per_lm(lm, ("has-stop", bytes(stop)), build)
