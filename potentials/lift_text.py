"""Masks inside text: the lifting shortcuts of the ``plain_text_*`` and ``inner_text_key`` hooks.

A Boolean potential's next-token mask is, in general, a walk of the vocabulary's byte trie from
the context's state (potentials.lift). Inside free text -- a JSON string, the one shipped user
of these hooks -- most tokens are *plain text* (potentials.text), and the hooks of the byte
contract (potentials.contract.HOOKS) let the mask be assembled from per-LM tables instead:

    mask(s) = others(s)  |  plain(s)
    plain(s)  = P & (chars <= B)                         with plain_text_budget(s) = B
              = L_k(P) & (chars <= B), L_k kept per k     with plain_text_key(s) = (k, B)
    others(s) = walk(s, tokens with a stop byte)  |  inner(k'), kept per k'
                                                          with inner_text_key(s) = (k', stop)

P the plain tokens, chars their character counts, L_k(P) computed once per key (through
``plain_text_automata`` over a character trie of P in array gathers, or by a walk of P's trie).
A state with no shortcut of its own whose ``alternatives`` all have inner keys is the union of
its alternatives' masks of the tokens without a stop byte, plus one walk of those with one;
any other state, the walk of the whole trie.
``TextMasks`` holds those per-key caches for one lifted potential; the tables below are built
once per LM (potentials.vocab.per_lm). Every result equals the plain trie walk's.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from potentials.contract import ByteContract
from potentials.text import is_plain_text, is_raw_text
from potentials.vocab import VocabTrie, flat_vocab, per_lm, stop_tokens

if TYPE_CHECKING:  # annotations only: potentials need nothing of smc at run time
    from smc.backends.base import LMBackend


def plain_trie(lm: LMBackend, skip: set[int]) -> VocabTrie:
    """The trie of ``lm``'s plain-text tokens (``is_plain_text``) without the ``skip`` ids."""
    plain = plain_tokens(lm, skip)[0]
    return per_lm(lm, ("plain-trie", tuple(sorted(skip))),
                   lambda: VocabTrie(lm.vocab, set(np.flatnonzero(~plain).tolist())))


#: levels of a CharTrie with fewer nodes than this, from some depth on, are walked node by node
DEEP_LEVEL = 64
#: a CharTrie level is stepped below its live parents only when they are fewer than its
#: nodes over this
SPARSE_SHARE = 8


class CharTrie:
    """The plain tokens' texts as a trie of characters, in arrays, level by level: node n > 0
    holds one character (``cp[n]``, an index into ``cps``) below ``parent[n]`` (0: the root);
    the nodes at depth d are ``levels[d-1]:levels[d]``; the text of token ``ids[i]`` ends at
    node ``end[i]``. A walk of an automaton over all of them is then one array gather per
    depth (``Lifted._automata_live``)."""

    def __init__(self, vocab: Sequence[bytes], ids: Sequence[int]):
        texts = {t: bytes(vocab[t]).decode("utf-8") for t in ids}
        prefixes = {text[:d] for text in texts.values() for d in range(1, len(text) + 1)}
        number: dict[str, int] = {"": 0}
        parent, chars, self.levels = [0], [0], [1]
        for text in sorted(prefixes, key=lambda x: (len(x), x)):
            if len(text) > len(self.levels):  # the first node one level deeper
                self.levels.append(len(parent))
            number[text] = len(parent)
            parent.append(number[text[:-1]])
            chars.append(ord(text[-1]))
        self.levels.append(len(parent))
        self.parent = np.asarray(parent, dtype=np.int32)
        self.cps, cp = np.unique(np.asarray(chars, dtype=np.int64), return_inverse=True)
        self.cp = cp.reshape(-1)
        self.ids = np.asarray(sorted(texts), dtype=np.int64)
        self.end = np.asarray([number[texts[t]] for t in self.ids.tolist()], dtype=np.int64)
        # the deep levels (long tokens: runs of spaces, dashes, ...) hold few nodes each; a walk
        # steps them one node at a time instead of paying a few array calls per level
        deep = len(self.levels) - 1
        while deep > 1 and self.levels[deep] - self.levels[deep - 1] < DEEP_LEVEL:
            deep -= 1
        self.deep = self.levels[deep]  # the first node stepped one at a time
        self.deep_parent = self.parent[self.deep:].tolist()
        # a node's children are contiguous (the nodes of one level are sorted by text), and
        # parents never decrease from one node to the next
        kids = self.parent[1:]
        nodes = np.arange(len(self.parent))
        self.first = (np.searchsorted(kids, nodes, side="left") + 1).astype(np.int64)
        self.n_kids = (np.searchsorted(kids, nodes, side="right") + 1 - self.first).astype(np.int64)

    def ends_alive(self, table: np.ndarray, cls: np.ndarray, dead: int, start: int = 0
                   ) -> np.ndarray:
        """Over ``ids``: does the automaton of ``ByteDFA.char_table`` (T, cls, dead, start)
        survive the token's text? i_node = T[i_parent, cls[cp[node]]], level by level from
        i_root = start.

        A level is stepped only below the nodes still alive when they are few (a pattern
        that allows few characters: dates, identifiers, enum-like alternations), else as a
        whole level; the sparse deep levels node by node."""
        width, flat = table.shape[1], table.reshape(-1)
        deep, parent, levels = self.deep, self.parent, self.levels
        state = np.full(len(parent), dead, dtype=np.int32)
        state[0] = start
        # the live nodes of the level just stepped (None: not listed, n_alive of them)
        alive: np.ndarray | None = np.zeros(1, dtype=np.int64)
        n_alive, prev_lo = 1, 0
        for lo, hi in zip(levels, levels[1:]):
            if lo >= deep or not n_alive:
                break
            if n_alive * SPARSE_SHARE < hi - lo:
                if alive is None:
                    alive = np.flatnonzero(state[prev_lo:lo] != dead) + prev_lo
                counts = self.n_kids[alive]
                total = int(counts.sum())
                if not total:
                    break
                # the children of the live nodes: each one's contiguous range, concatenated
                ends = np.cumsum(counts)
                kids = np.arange(total) + np.repeat(self.first[alive] - (ends - counts), counts)
                at = np.repeat(state[alive], counts) * width
                at += cls[self.cp[kids]]
                got = flat[at]
                state[kids] = got
                alive = kids[got != dead]
                n_alive = len(alive)
            else:
                at = state[parent[lo:hi]] * width
                at += cls[self.cp[lo:hi]]
                got = flat[at]
                state[lo:hi] = got
                alive, n_alive = None, int(np.count_nonzero(got != dead))
            prev_lo = lo
        if deep < len(state) and n_alive:  # the deep nodes, each below an earlier one
            flat_list, deep_cls = flat.tolist(), cls[self.cp[deep:]].tolist()
            upper = state[self.deep_parent].tolist()  # (read for parents above ``deep`` only)
            out: list[int] = []
            for k, (p, c) in enumerate(zip(self.deep_parent, deep_cls)):
                out.append(flat_list[(out[p - deep] if p >= deep else upper[k]) * width + c])
            state[deep:] = out
        return state[self.end] != dead


def plain_char_trie(lm: LMBackend, skip: set[int]) -> CharTrie:
    """The ``CharTrie`` of ``lm``'s plain-text tokens without the ``skip`` ids, once per LM."""
    plain = plain_tokens(lm, skip)[0]
    return per_lm(lm, ("plain-chars", tuple(sorted(skip))),
                   lambda: CharTrie(lm.vocab, np.flatnonzero(plain).tolist()))


def raw_tries(lm: LMBackend, skip: set[int], stop: bytes) -> tuple[VocabTrie, VocabTrie]:
    """The non-plain tokens with no byte of ``stop`` (``stop_tries``' first trie) split in
    two tries: the raw ones (``is_raw_text``) and the rest; built once per LM."""

    def build() -> tuple[VocabTrie, VocabTrie]:
        plain = plain_tokens(lm, skip)[0]
        stopped = stop_tokens(lm, stop)
        free = set(np.flatnonzero(~plain & ~stopped).tolist()) - set(skip)
        raw = {t for t in free if is_raw_text(bytes(lm.vocab[t]))}
        everything = set(range(len(lm.vocab)))
        return (VocabTrie(lm.vocab, everything - raw), VocabTrie(lm.vocab, everything - (free - raw)))

    return per_lm(lm, ("raw", tuple(sorted(skip)), bytes(stop)), build)


def begun_chars(lm: LMBackend, skip: set[int]) -> np.ndarray:
    """Each token's ``chars_begun`` (ASCII and UTF-8 leading bytes), vectorized, once per LM."""

    def build() -> np.ndarray:
        buf, lens = flat_vocab(lm)
        owner = np.repeat(np.arange(len(lens)), lens)
        starts = (buf < 0x80) | (buf >= 0xC0)
        return np.bincount(owner[starts], minlength=len(lens))

    return per_lm(lm, ("begun",), build)


def stop_tries(lm: LMBackend, skip: set[int], stop: bytes) -> tuple[VocabTrie, VocabTrie]:
    """(trie of the non-plain tokens with no byte of ``stop``, trie of those with one),
    ``skip`` ids excluded; built once per LM, skip set and stop bytes."""

    def build() -> tuple[VocabTrie, VocabTrie]:
        plain = plain_tokens(lm, skip)[0]
        stopped = {t for t, tok in enumerate(lm.vocab) if any(b in stop for b in bytes(tok))}
        other = set(np.flatnonzero(plain).tolist()) | set(skip)
        return (VocabTrie(lm.vocab, other | stopped),
                VocabTrie(lm.vocab, other | (set(range(len(lm.vocab))) - stopped)))

    return per_lm(lm, ("stop", tuple(sorted(skip)), bytes(stop)), build)


def plain_stopped(lm: LMBackend, skip: set[int], stop: bytes) -> bool:
    """Does some plain token contain a byte of ``stop``? (``stop_tries`` leaves plain tokens
    out, so ``Lifted._union_mask`` then walks the whole trie.)"""
    return bool((plain_tokens(lm, skip)[0] & stop_tokens(lm, stop)).any())


def plain_tokens(lm: LMBackend, skip: set[int]) -> tuple[np.ndarray, np.ndarray, VocabTrie]:
    """(which tokens are plain text, their character counts, the trie of all other tokens),
    ``skip`` ids excluded everywhere; built once per LM and skip set."""

    def build() -> tuple[np.ndarray, np.ndarray, VocabTrie]:
        plain = np.zeros(len(lm.vocab), dtype=bool)
        chars = np.zeros(len(lm.vocab), dtype=np.int64)
        for t, tok in enumerate(lm.vocab):
            if t not in skip and is_plain_text(bytes(tok)):
                plain[t], chars[t] = True, len(bytes(tok).decode("utf-8"))
        return plain, chars, VocabTrie(lm.vocab, skip | set(np.flatnonzero(plain).tolist()))

    return per_lm(lm, ("plain", tuple(sorted(skip))), build)


class TextMasks:
    """The text shortcuts of one lifted Boolean potential (module docstring) and their caches.

    Args:
        potential: the byte potential (its hooks give the shortcuts).
        lm: the backend (the caches of a class with ``shares_text_keys`` are kept per LM).
        size: the vocabulary's size.
        stats: the lifted potential's counters (``trie_nodes_visited`` grows here too).
        table: ``table(build, *args)``, a per-LM table of this module for the lifted potential.
        walk_mask: ``walk_mask(state, trie)``, which tokens of ``trie`` keep ``state`` alive.
        full_trie: the trie of the whole vocabulary.

    Attributes (read by tests; what each key cached): ``plain_masks`` (plain_text_key k ->
    (L_k over the plain tokens of at most B characters, B)), ``inner`` (inner_text_key k -> the
    live non-plain tokens without a stop byte), ``nonstop`` (inner_text_key k -> the mask of
    every live token without one, for the alternatives of a state).
    """

    def __init__(self, potential: ByteContract, lm: LMBackend, size: int, stats: dict[str, int],
                 table: Callable[..., Any], walk_mask: Callable[[Any, VocabTrie], Any],
                 full_trie: Callable[[], VocabTrie]):
        self.potential, self.size, self.stats = potential, size, stats
        self.table, self.walk_mask, self.full_trie = table, walk_mask, full_trie
        self._plain: tuple[np.ndarray, np.ndarray, VocabTrie] | None = None
        self.plain_masks: OrderedDict[Any, tuple[np.ndarray, float]] = OrderedDict()
        self.plain_mask_cache_size = 64
        self.inner: OrderedDict[Any, np.ndarray] = OrderedDict()
        self.nonstop: OrderedDict[Any, np.ndarray] = OrderedDict()
        self.inner_cache_size = 256
        if potential.shares_text_keys:  # one set of caches per LM and class
            self.plain_masks, self.inner, self.nonstop = per_lm(
                lm, ("text-keys", type(potential)),
                lambda: (OrderedDict(), OrderedDict(), OrderedDict()))

    def build_tables(self) -> None:
        """Build the plain tokens' tables now (see ``Lifted.build_tables``)."""
        self._plain = self.table(plain_tokens)
        self.table(plain_trie)
        self.table(plain_char_trie)

    async def mask(self, state: Any) -> np.ndarray:
        """Boolean potentials: which non-EOS tokens keep the byte state alive. Without a
        plain-text shortcut of its own, a state is masked through its ``alternatives``
        (``_union_mask``) or by a walk of the whole trie."""
        shortcut = self._shortcut(state)
        if shortcut is None:
            return await self._union_mask(state)
        if self._plain is None:
            self._plain = self.table(plain_tokens)
        mask = await self._others_mask(state, self._plain[2])
        mask |= await self._plain_part(state, *shortcut)
        return mask

    def _shortcut(self, state: Any) -> tuple[Any, float] | None:
        """(plain key or None, budget B) from ``plain_text_budget`` or ``plain_text_key``."""
        pot = self.potential
        budget = pot.plain_text_budget(state)
        if budget is not None:
            return None, budget
        return pot.plain_text_key(state)

    async def _plain_part(self, state: Any, key: Any, budget: float) -> np.ndarray:
        """Which plain tokens keep ``state`` alive, from its shortcut: those of at most
        ``budget`` characters, and in L_k (kept per plain key k) when there is a key."""
        if self._plain is None:
            self._plain = self.table(plain_tokens)
        plain, chars, _ = self._plain
        if key is None:
            return plain & (chars <= budget)
        got = self.plain_masks.get(key)
        if got is None or got[1] < budget:
            # L_k on the plain tokens of at most `budget` characters (all of them when no plain
            # token is longer): valid for every later state of key k with a budget <= this one
            trie = self.table(plain_trie)
            automata = self.potential.plain_text_automata(key)
            if automata is not None:  # L_k for every plain token, whatever its length
                got = (self.automata_live(automata, trie), math.inf)
            else:
                alive = await self.walk_mask(state, trie)
                got = (alive, math.inf if budget >= chars.max(initial=0) else budget)
            self.plain_masks[key] = got
            if len(self.plain_masks) > self.plain_mask_cache_size:
                self.plain_masks.popitem(last=False)
        else:
            self.plain_masks.move_to_end(key)
        return got[0] & (chars <= budget)

    async def _union_mask(self, state: Any) -> np.ndarray:
        """A state whose ``alternatives`` (or, without any, the state itself) all have an
        ``inner_text_key`` with one stop set S (JSON: configurations inside strings, S the
        quote, also inside an escape or an enum value):

            mask(s) = walk(s, tokens with a byte of S)  |  OR_i nonstop(s_i)

        the tokens with a stop byte walked once from the whole state (they may close the
        string and read the document around it), the others through each alternative's
        ``_nonstop_mask``, kept per inner key. Any other state: a walk of the whole trie."""
        pot = self.potential
        parts = pot.alternatives(state) or [state]
        inners = [pot.inner_text_key(part) for part in parts]
        stops = {None if k is None else bytes(k[1]) for k in inners}
        stop = stops.pop() if len(stops) == 1 else None
        if stop is None or self.table(plain_stopped, stop):
            return await self.walk_mask(state, self.full_trie())
        mask = await self.walk_mask(state, self.table(stop_tries, stop)[1])
        for part, (key, _) in zip(parts, inners):
            mask |= await self._nonstop_mask(part, key, stop)
        return mask

    async def _nonstop_mask(self, state: Any, key: Any, stop: bytes) -> np.ndarray:
        """Which tokens without a byte of ``stop`` keep ``state`` alive, a function of its
        ``inner_text_key`` ``key`` (kept per key): the plain tokens (none has a stop byte:
        ``_union_mask``) through the state's shortcut or a walk of their trie, the others as
        in ``_others_mask``."""
        got = self.nonstop.get(key)
        if got is not None:
            self.nonstop.move_to_end(key)
            return got
        shortcut = self._shortcut(state)
        if shortcut is not None:
            mask = await self._plain_part(state, *shortcut)
        else:
            mask = await self.walk_mask(state, self.table(plain_trie))
        free = self.table(stop_tries, stop)[0]
        mask[await self._inner_alive(state, key, stop, free)] = True
        self.nonstop[key] = mask
        if len(self.nonstop) > self.inner_cache_size:
            self.nonstop.popitem(last=False)
        return mask

    async def _inner_live(self, state: Any, stop: bytes, free: VocabTrie) -> np.ndarray:
        """Which tokens of ``free`` (not plain, no stop byte) keep ``state`` alive. With
        ``plain_text_automata`` for the state's plain key, the raw ones (``is_raw_text``:
        characters cut at the token's end, most of them) are L_k through the automata and
        begin at most B characters; the others (escapes, control bytes) are walked."""
        pot = self.potential
        split = pot.plain_text_key(state)
        automata = None if split is None else pot.plain_text_automata(split[0])
        if automata is None:
            return await self.walk_mask(state, free)
        raw, rest = self.table(raw_tries, stop)
        live = self.automata_live(automata, raw, chars=False)
        live &= self.table(begun_chars) <= split[1]
        live |= await self.walk_mask(state, rest)
        return live

    def automata_live(self, automata: Sequence[Sequence[tuple[Any, Any]]],
                       trie: VocabTrie, chars: bool = True) -> np.ndarray:
        """Which tokens of ``trie`` are in L_k, from the automata of ``plain_text_automata``:
        for plain tokens (``chars``) an automaton with a ``char_table`` (``ByteDFA``) runs
        over the plain tokens' character trie in array gathers, one per depth; any other
        automaton, a table too large, or tokens that are not plain walk the byte trie
        carrying the automata's states."""
        children, label, tokens = trie.children, trie.label, trie.tokens
        found: list[int] = []
        visited = 0
        out = np.zeros(self.size, dtype=bool)
        char_trie = self.table(plain_char_trie) if chars else None
        in_l = None  # over char_trie.ids: the union of the alternatives run on character tables
        for alt in automata:
            if not alt:  # no automaton: every token of the trie
                for toks in tokens:
                    found.extend(toks)
                continue
            tables = [a.char_table(q, char_trie.cps)
                      if char_trie is not None and hasattr(a, "char_table") else None
                      for a, q in alt]
            if char_trie is not None and all(t is not None for t in tables):
                keep = None
                for table in tables:
                    alive = char_trie.ends_alive(*table)
                    keep = alive if keep is None else keep & alive
                in_l = keep if in_l is None else in_l | keep
                continue
            walks = [a.walk for a, _ in alt]
            stack = [(child, tuple(q for _, q in alt)) for child in children[0]]
            while stack:
                node, states = stack.pop()
                visited += 1
                lab = label[node]
                if len(walks) == 1:
                    q = walks[0](states[0], lab)
                    if q is None:
                        continue
                    here: tuple = (q,)
                else:
                    here = tuple(w(q, lab) for w, q in zip(walks, states))
                    if None in here:
                        continue
                if tokens[node]:
                    found.extend(tokens[node])
                for child in children[node]:
                    stack.append((child, here))
        self.stats["trie_nodes_visited"] += visited
        if in_l is not None:
            out[char_trie.ids] = in_l
        out[found] = True
        return out

    async def _others_mask(self, state: Any, others: VocabTrie) -> np.ndarray:
        """Which non-plain tokens keep ``state`` alive: those without a stop byte of the
        potential's ``inner_text_key`` from the per-key cache (walked once per key), the
        others walked here; all walked when there is no such key."""
        inner = self.potential.inner_text_key(state)
        if inner is None:
            return await self.walk_mask(state, others)
        key, stop = inner
        free, stopped = self.table(stop_tries, stop)
        mask = await self.walk_mask(state, stopped)
        mask[await self._inner_alive(state, key, stop, free)] = True
        return mask

    async def _inner_alive(self, state: Any, key: Any, stop: bytes, free: VocabTrie) -> np.ndarray:
        """The ids of ``_inner_live``, kept per inner key."""
        alive = self.inner.get(key)
        if alive is None:
            alive = self.inner[key] = np.flatnonzero(await self._inner_live(state, stop, free))
            if len(self.inner) > self.inner_cache_size:
                self.inner.popitem(last=False)
        else:
            self.inner.move_to_end(key)
        return alive
