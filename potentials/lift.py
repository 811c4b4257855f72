"""Lifting a byte-level potential to an LM's token vocabulary.

With V the LM's vocabulary (token id -> bytes) and phi a BytePotential, the lifted potential on
token sequences x = (x_1 .. x_n) is

    prefix(x)   = phi.prefix(V[x_1] ... V[x_n])
    complete(x) = phi.complete(V[x_1] ... V[x_n])

EOS tokens end the sequence (their position in logw_next carries complete - prefix); special
(control) tokens other than EOS and tokens with no bytes never stand for text: weight 0 (-inf).

Each context's byte-level state is memoized (bounded, oldest evicted first), so checking token t after context x
advances the state of x over V[t] only: O(len(V[t])), whatever the length of x. ``logw_next``
walks a byte trie of the whole vocabulary from the state of x, skipping every subtree whose
shared bytes already kill the prefix. For Boolean potentials the resulting mask is shared by
states with equal ``mask_key``, and where the potential gives a ``plain_text_budget`` B (inside
a JSON string), plain tokens are decided at once (alive iff at most B characters) and only the
few others (quotes, escapes, control bytes, partial characters) are walked. Where it gives a
``plain_text_key`` (k, B) instead (inside a JSON string with a ``pattern``), the plain tokens'
liveness L_k is walked once per key and kept (for the largest budget seen), and each mask is
that cached set cut to at most B characters plus the walk of the few others. With an
``inner_text_key`` (k, stop) too (inside any JSON string), those others that have no stop byte
(partial characters, escapes, control bytes) are also walked once per key, so a mask there
walks only the tokens with a quote. Where the potential gives ``next_bytes``, trie nodes with
many children are descended only through the bytes it allows; where ``plain_text_automata``
gives L_k as automata with character tables, L_k is computed over a character trie of the plain
tokens in array operations; a state with none of these shortcuts whose ``alternatives`` (or
itself) have inner keys walks its tokens with a stop byte once and takes the others from each
alternative's mask of them, kept per inner key. Masks of at most
``support_limit`` allowed tokens also keep their token ids (``known_support``), so a sampler at
such a state needs no checks.
"""

from __future__ import annotations

import math
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np

# the contract, not potentials.base: BytePotential.lift there builds a Lifted
from potentials.contract import NEG_INF, ByteContract, Potential
from potentials.text import is_plain_text, is_raw_text

if TYPE_CHECKING:  # annotations only: potentials need nothing of smc at run time
    from smc.backends.base import LMBackend

_MISSING = object()
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
    """Each token's ``chars_begun`` (ASCII and UTF-8 lead bytes), vectorized, once per LM."""

    def build() -> np.ndarray:
        buf, lens = _flat(lm)
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


def _flat(lm: LMBackend) -> tuple[np.ndarray, np.ndarray]:
    """(every token's bytes concatenated, as uint8; each token's length), built once per LM."""

    def build() -> tuple[np.ndarray, np.ndarray]:
        toks = [bytes(t) for t in lm.vocab]
        return (np.frombuffer(b"".join(toks), dtype=np.uint8),
                np.fromiter(map(len, toks), dtype=np.int64, count=len(toks)))

    return per_lm(lm, ("flat",), build)


def last_bytes(lm: LMBackend) -> np.ndarray:
    """Each token's last byte (-1 for a token with no bytes), built once per LM."""

    def build() -> np.ndarray:
        buf, lens = _flat(lm)
        out = np.full(len(lens), -1, dtype=np.int16)
        some = lens > 0
        out[some] = buf[np.cumsum(lens)[some] - 1]
        return out

    return per_lm(lm, ("last",), build)


def stop_tokens(lm: LMBackend, stop: bytes) -> np.ndarray:
    """Which tokens contain a byte of ``stop``, built once per LM and stop bytes."""

    def build() -> np.ndarray:
        buf, lens = _flat(lm)
        owner = np.repeat(np.arange(len(lens)), lens)
        out = np.zeros(len(lens), dtype=bool)
        out[owner[np.isin(buf, np.frombuffer(bytes(stop), dtype=np.uint8))]] = True
        return out

    return per_lm(lm, ("has-stop", bytes(stop)), build)


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


class Lifted(Potential):
    """``potential`` over ``lm``'s tokens (contexts: tuples of generated token ids, no prompt).

    Args:
        potential: the byte-level potential.
        lm: any backend with ``vocab`` and ``eos_token_ids`` (``special_token_ids`` optional).
        cache_size: how many contexts' byte states are kept (the oldest evicted first; an
            evicted state is recomputed from its bytes, so eviction never changes results).

    Attributes (public, read-only):
        potential: the byte-level potential lifted (``factors()`` are its factors).
        lm: the backend.
        vocab: the bytes of every token id.
    """

    def __init__(self, potential: ByteContract, lm: LMBackend, cache_size: int = 20_000):
        if not isinstance(potential, ByteContract):
            raise TypeError(f"Lifted needs a BytePotential, got {type(potential).__name__}")
        if cache_size < 1:
            raise ValueError(f"cache_size must be positive, got {cache_size}")
        self.potential, self.lm = potential, lm
        # per LM, not per potential: ~25 ms at a 128k vocabulary, for every constraint lifted
        vocab = self.vocab = per_lm(lm, ("bytes",), lambda: [bytes(v) for v in lm.vocab])
        self.size = len(self.vocab)
        self.eos_ids = tuple(int(i) for i in lm.eos_token_ids)
        self._eos = frozenset(self.eos_ids)
        special = {int(i) for i in getattr(lm, "special_token_ids", ())}
        empty = per_lm(lm, ("empty",), lambda: frozenset(i for i, v in enumerate(vocab) if not v))
        self._blocked = frozenset((special | empty) - self._eos)
        self._cache_size = cache_size
        # oldest-first eviction without reordering on hits: a hit then costs one hash of the
        # context tuple (move_to_end would hash it again)
        self._states: dict[tuple[int, ...], Any] = {}
        self._trie: VocabTrie | None = None
        self._tables: dict[tuple, Any] = {}
        self._plain: tuple[np.ndarray, np.ndarray, VocabTrie] | None = None
        # a Boolean potential's next-token mask depends on its state's mask_key only (a regex's
        # DFA state, a JSON recognizer's configurations): one mask per key, shared by particles
        self._masks: OrderedDict[Any, np.ndarray] = OrderedDict()
        self.mask_cache_size = 256
        # the allowed non-EOS tokens of the cached masks with at most support_limit of them, and
        # the same with the EOS ids added, for states where the text may end (known_support):
        # samplers then need no constraint checks at such a state
        self._supports: dict[Any, tuple[np.ndarray, np.ndarray]] = {}
        self.support_limit = 4096
        # plain_text_key k -> (which plain tokens satisfy L_k among those of at most B chars, B)
        self._plain_masks: OrderedDict[Any, tuple[np.ndarray, float]] = OrderedDict()
        self.plain_mask_cache_size = 64
        # inner_text_key k -> the live non-plain tokens without a stop byte, and (for the
        # alternatives of a state) the mask of every live token without one
        self._inner: OrderedDict[Any, np.ndarray] = OrderedDict()
        self._nonstop: OrderedDict[Any, np.ndarray] = OrderedDict()
        self.inner_cache_size = 256
        if potential.shares_text_keys:  # one set of caches per LM and class
            self._plain_masks, self._inner, self._nonstop = per_lm(
                lm, ("text-keys", type(potential)),
                lambda: (OrderedDict(), OrderedDict(), OrderedDict()))
        # complete_key k -> the tokens after which the text can end (``finishing``)
        self._finishing: OrderedDict[Any, np.ndarray] = OrderedDict()
        self._final: np.ndarray | None = None
        self._root_live: bool | None = None
        self.stats = {"tokens_checked": 0, "trie_nodes_visited": 0, "state_cache_hits": 0,
                      "state_cache_misses": 0, "mask_cache_hits": 0}

    def __repr__(self) -> str:
        return f"Lifted({self.potential!r}, vocab={self.size})"

    def factors(self) -> tuple[Potential, ...]:
        return self.potential.factors()

    # -- byte states of token contexts
    def is_text(self, token: int) -> bool:
        """Whether ``token`` stands for text: not an EOS id, not a control token of the LM
        (``special_token_ids``) and not a token of no bytes. Every other token has weight 0
        in ``logw_next`` (EOS has its own entry)."""
        return token not in self._eos and token not in self._blocked

    def _step(self, state: Any, token: int) -> Any:
        """Byte state after ``token`` (None: dead, or a token that is no text)."""
        if state is None or token in self._eos or token in self._blocked:
            return None
        return self.potential.advance(state, self.vocab[token])

    def _check(self, token: Any) -> int:
        if not isinstance(token, (int, np.integer)) or not 0 <= token < self.size:
            raise ValueError(f"token id {token!r} is not in the vocabulary [0, {self.size})")
        return int(token)

    def state(self, ctx: Sequence[int]) -> Any:
        """The potential's byte state after the tokens ``ctx`` (None once dead)."""
        if type(ctx) is not tuple:
            ctx = tuple(ctx)
        got = self._states.get(ctx, _MISSING)
        if got is not _MISSING:
            self.stats["state_cache_hits"] += 1
            return got
        self.stats["state_cache_misses"] += 1
        if not ctx:
            got = self.potential.initial()
        else:
            parent = self._states.get(ctx[:-1], _MISSING)
            if parent is _MISSING:  # evicted or never seen: replay from the start
                parent = self.potential.initial()
                for t in ctx[:-1]:
                    parent = self._step(parent, self._check(t))
            got = self._step(parent, self._check(ctx[-1]))
        self._keep_state(ctx, got)
        return got

    def _keep_state(self, ctx: tuple[int, ...], state: Any) -> None:
        self._states[ctx] = state
        if len(self._states) > self._cache_size:
            del self._states[next(iter(self._states))]

    async def _base(self, ctx: Sequence[int]) -> tuple[Any, float]:
        state = self.state(ctx)
        if state is None:
            return None, NEG_INF
        if self.potential.boolean and len(ctx):
            return state, 0.0
        # the initial state of a Boolean potential may itself be dead (empty language)
        if self.potential.boolean and self._root_live is not None:
            return state, 0.0 if self._root_live else NEG_INF
        w = await self.potential.state_prefix(state)
        if self.potential.boolean:
            self._root_live = w > NEG_INF
        return state, w

    async def prefix(self, ctx: Sequence[int]) -> float:
        return (await self._base(ctx))[1]

    async def complete(self, ctx: Sequence[int]) -> float:
        state, base = await self._base(ctx)
        if base == NEG_INF:
            return NEG_INF
        return await self.potential.state_complete(state)

    async def logw_subset(self, ctx: Sequence[int], symbols: Sequence[int]) -> np.ndarray:
        state, base = await self._base(ctx)
        if base == NEG_INF:
            return np.full(len(symbols), NEG_INF)
        self.stats["tokens_checked"] += len(symbols)
        pot = self.potential
        # a sampler's one-token check: if the token is taken, its state is asked for next step
        keep_at = (ctx if type(ctx) is tuple else tuple(ctx)) if len(symbols) == 1 else None
        out: list[float] = []
        done: float | None = None
        for t in symbols:
            t = self._check(t)
            if t in self._eos:
                if done is None:
                    done = await pot.state_complete(state) - base
                out.append(done)
                continue
            nxt = self._step(state, t)
            if keep_at is not None:
                self._keep_state(keep_at + (t,), nxt)
            if nxt is None:
                out.append(NEG_INF)
            else:
                out.append(0.0 if pot.boolean else await pot.state_prefix(nxt) - base)
        return np.array(out, dtype=float)

    async def logw_next(self, ctx: Sequence[int]) -> np.ndarray:
        state, base = await self._base(ctx)
        out = np.full(self.size, NEG_INF)
        if base == NEG_INF:
            return out
        done = await self.potential.state_complete(state) - base
        if self.potential.boolean:
            out[await self._cached_mask(state)] = 0.0
        else:
            out = await self._walk(state, base, self._full_trie())
        for e in self.eos_ids:
            out[e] = done
        return out

    async def known_support(self, ctx: Sequence[int]) -> np.ndarray | None:
        """The allowed tokens (EOS included when the text may end) of a Boolean potential at
        ``ctx`` when a mask with at most ``support_limit`` tokens is cached for its state's
        ``mask_key`` (see ``Potential.known_support``); None otherwise."""
        if not self._supports:
            return None
        state, base = await self._base(ctx)
        if base == NEG_INF:
            return np.zeros(0, dtype=np.int64)
        key = self.potential.mask_key(state)
        got = None if key is None else self._supports.get(key)
        if got is None:
            return None
        self.stats["mask_cache_hits"] += 1
        allowed, with_eos = got
        return with_eos if await self.potential.state_complete(state) - base > NEG_INF else allowed

    async def mask_would_be_kept(self, ctx: Sequence[int]) -> bool:
        """A Boolean potential whose state at ``ctx`` has a ``mask_key`` with no cached mask:
        ``logw_next`` would compute the mask and keep it (``_cached_mask``)."""
        if not self.potential.boolean:
            return False
        state, base = await self._base(ctx)
        if base == NEG_INF:
            return False
        key = self.potential.mask_key(state)
        return key is not None and key not in self._masks

    async def finishing(self, ctx: Sequence[int], cheap: bool = False) -> np.ndarray | None:
        """The sorted non-EOS token ids t with complete(ctx t) > -inf (the tokens after which
        a forced EOS keeps the text: potentials.finishing).

        With a ``complete_key`` for the state: one walk of the trie per key (dead subtrees
        skipped, acceptance read at each token), kept. Otherwise only these tokens are asked,
        each with ``complete_after``: those ending in one of the potential's ``final_bytes``,
        with a stop byte of the state's ``inner_text_key`` (the others stay inside the
        string), and allowed by the state's mask when one is cached (Boolean potentials).
        ``cheap``: None instead of a trie walk for a new key, or of more than
        ``support_limit`` checks."""
        state, base = await self._base(ctx)
        if base == NEG_INF:
            return np.zeros(0, dtype=np.int64)
        pot = self.potential
        key = pot.complete_key(state)
        if key is not None:
            got = self._finishing.get(key)
            if got is None:
                if cheap:
                    return None
                got = self._finishing[key] = await self._finishing_walk(state)
                if len(self._finishing) > self.mask_cache_size:
                    self._finishing.popitem(last=False)
            return got
        candidates = self._final_candidates()
        inner = pot.inner_text_key(state)
        if inner is not None:
            candidates = candidates[stop_tokens(self.lm, inner[1])[candidates]]
        if pot.boolean:
            mkey = pot.mask_key(state)
            mask = None if mkey is None else self._masks.get(mkey)
            if mask is not None:
                candidates = candidates[mask[candidates]]
        if cheap and len(candidates) > self.support_limit:
            return None
        complete_after, vocab = pot.complete_after, self.vocab
        self.stats["tokens_checked"] += len(candidates)
        keep = [t for t in candidates.tolist() if await complete_after(state, vocab[t]) > NEG_INF]
        return np.asarray(keep, dtype=np.int64)

    def _final_candidates(self) -> np.ndarray:
        """The text tokens (no EOS, nothing blocked) whose last byte is in ``final_bytes``."""
        if self._final is None:
            last = last_bytes(self.lm)
            ok = last >= 0
            final = self.potential.final_bytes()
            if final is not None:
                ok &= np.isin(last, np.frombuffer(bytes(final), dtype=np.uint8).astype(np.int16))
            ok[list(self._eos | self._blocked)] = False
            self._final = np.flatnonzero(ok)
        return self._final

    async def _finishing_walk(self, state: Any) -> np.ndarray:
        """The trie walk of ``_walk`` from ``state``, keeping the tokens whose state accepts."""
        state_complete = self.potential.state_complete
        keep: list[int] = []
        for toks, here in self._live_nodes(state, self._full_trie()):
            if await state_complete(here) > NEG_INF:
                keep.extend(toks)
        return np.asarray(sorted(keep), dtype=np.int64)

    async def _cached_mask(self, state: Any) -> np.ndarray:
        """``_mask(state)``, kept per ``mask_key`` (with the allowed ids of small masks)."""
        key = self.potential.mask_key(state)
        mask = None if key is None else self._masks.get(key)
        if mask is not None:
            self._masks.move_to_end(key)
            self.stats["mask_cache_hits"] += 1
            return mask
        mask = await self._mask(state)
        if key is not None:
            self._masks[key] = mask
            allowed = np.flatnonzero(mask)
            if len(allowed) <= self.support_limit:
                self._supports[key] = (allowed, np.union1d(allowed, self.eos_ids))
            if len(self._masks) > self.mask_cache_size:
                self._supports.pop(self._masks.popitem(last=False)[0], None)
        return mask

    async def _mask(self, state: Any) -> np.ndarray:
        """Boolean potentials: which non-EOS tokens keep the byte state alive. Without a
        plain-text shortcut of its own, a state is masked through its ``alternatives``
        (``_union_mask``) or by a walk of the whole trie."""
        shortcut = self._shortcut(state)
        if shortcut is None:
            return await self._union_mask(state)
        if self._plain is None:
            self._plain = self._lm_table(plain_tokens)
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
            self._plain = self._lm_table(plain_tokens)
        plain, chars, _ = self._plain
        if key is None:
            return plain & (chars <= budget)
        got = self._plain_masks.get(key)
        if got is None or got[1] < budget:
            # L_k on the plain tokens of at most `budget` characters (all of them when no plain
            # token is longer): valid for every later state of key k with a budget <= this one
            trie = self._lm_table(plain_trie)
            automata = self.potential.plain_text_automata(key)
            if automata is not None:  # L_k for every plain token, whatever its length
                got = (self._automata_live(automata, trie), math.inf)
            else:
                alive = await self._walk_mask(state, trie)
                got = (alive, math.inf if budget >= chars.max(initial=0) else budget)
            self._plain_masks[key] = got
            if len(self._plain_masks) > self.plain_mask_cache_size:
                self._plain_masks.popitem(last=False)
        else:
            self._plain_masks.move_to_end(key)
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
        if stop is None or self._lm_table(plain_stopped, stop):
            return await self._walk_mask(state, self._full_trie())
        mask = await self._walk_mask(state, self._lm_table(stop_tries, stop)[1])
        for part, (key, _) in zip(parts, inners):
            mask |= await self._nonstop_mask(part, key, stop)
        return mask

    async def _nonstop_mask(self, state: Any, key: Any, stop: bytes) -> np.ndarray:
        """Which tokens without a byte of ``stop`` keep ``state`` alive, a function of its
        ``inner_text_key`` ``key`` (kept per key): the plain tokens (none has a stop byte:
        ``_union_mask``) through the state's shortcut or a walk of their trie, the others as
        in ``_others_mask``."""
        got = self._nonstop.get(key)
        if got is not None:
            self._nonstop.move_to_end(key)
            return got
        shortcut = self._shortcut(state)
        if shortcut is not None:
            mask = await self._plain_part(state, *shortcut)
        else:
            mask = await self._walk_mask(state, self._lm_table(plain_trie))
        free = self._lm_table(stop_tries, stop)[0]
        mask[await self._inner_alive(state, key, stop, free)] = True
        self._nonstop[key] = mask
        if len(self._nonstop) > self.inner_cache_size:
            self._nonstop.popitem(last=False)
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
            return await self._walk_mask(state, free)
        raw, rest = self._lm_table(raw_tries, stop)
        live = self._automata_live(automata, raw, chars=False)
        live &= self._lm_table(begun_chars) <= split[1]
        live |= await self._walk_mask(state, rest)
        return live

    def _automata_live(self, automata: Sequence[Sequence[tuple[Any, Any]]],
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
        char_trie = self._lm_table(plain_char_trie) if chars else None
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
            return await self._walk_mask(state, others)
        key, stop = inner
        free, stopped = self._lm_table(stop_tries, stop)
        mask = await self._walk_mask(state, stopped)
        mask[await self._inner_alive(state, key, stop, free)] = True
        return mask

    async def _inner_alive(self, state: Any, key: Any, stop: bytes, free: VocabTrie) -> np.ndarray:
        """The ids of ``_inner_live``, kept per inner key."""
        alive = self._inner.get(key)
        if alive is None:
            alive = self._inner[key] = np.flatnonzero(await self._inner_live(state, stop, free))
            if len(self._inner) > self.inner_cache_size:
                self._inner.popitem(last=False)
        else:
            self._inner.move_to_end(key)
        return alive

    def _lm_table(self, build: Callable[..., Any], *args: Any) -> Any:
        """``build(lm, skipped ids, *args)``: a per-LM table (built once per LM), looked up
        once per potential (the per-LM key sorts the skipped ids)."""
        key = (build, *args)
        got = self._tables.get(key)
        if got is None:
            got = self._tables[key] = build(self.lm, set(self._eos | self._blocked), *args)
        return got

    def build_tables(self) -> None:
        """Build the per-LM vocabulary tables now: the byte trie, the plain tokens' tries and
        their character trie. The first mask that needs one builds it otherwise (about 2 s for
        the byte trie at a 128k vocabulary); every lifted potential of the LM shares them, so
        a server or a timing loop builds them once, up front."""
        self._full_trie()
        self._plain = self._lm_table(plain_tokens)
        self._lm_table(plain_trie)
        self._lm_table(plain_char_trie)

    def _full_trie(self) -> VocabTrie:
        if self._trie is None:
            self._trie = self._lm_table(vocab_trie)
        return self._trie

    def _live_nodes(self, state: Any, trie: VocabTrie) -> Iterator[tuple[tuple[int, ...], Any]]:
        """(token ids ending at the node, byte state there) for every trie node with tokens
        whose bytes keep ``state`` alive; a dead node's subtree is skipped."""
        advance, next_bytes = self.potential.advance, self.potential.next_bytes
        children, label, tokens, by_first = trie.children, trie.label, trie.tokens, trie.by_first
        # the nodes to visit and the byte states above them, as two stacks (a pair per node
        # would be one more tracked allocation per node: the garbage collector's pace)
        nodes: list[int] = []
        above: list[Any] = []
        push_node, push_above = nodes.append, above.append

        def descend(node: int, kids: dict[int, int], here: Any) -> None:
            allowed = next_bytes(here)
            if allowed is None:
                for child in children[node]:
                    push_node(child)
                    push_above(here)
            elif len(allowed) < len(kids):
                for b in allowed:
                    child = kids.get(b)
                    if child is not None:
                        push_node(child)
                        push_above(here)
            else:
                for b, child in kids.items():
                    if b in allowed:
                        push_node(child)
                        push_above(here)

        root_kids = by_first.get(0)
        if root_kids is None:
            nodes.extend(children[0])
            above.extend([state] * len(children[0]))
        else:
            descend(0, root_kids, state)
        visited = 0
        while nodes:
            node = nodes.pop()
            visited += 1
            here = advance(above.pop(), label[node])
            if here is None:
                continue  # every token below shares these dead bytes
            if tokens[node]:
                yield tokens[node], here
            kids = by_first.get(node)
            if kids is None:
                for child in children[node]:
                    push_node(child)
                    push_above(here)
            else:
                descend(node, kids, here)
        self.stats["trie_nodes_visited"] += visited

    async def _walk_mask(self, state: Any, trie: VocabTrie) -> np.ndarray:
        """Boolean potentials: which tokens of ``trie`` keep ``state`` alive."""
        found: list[int] = []
        for toks, _ in self._live_nodes(state, trie):
            found.extend(toks)
        mask = np.zeros(self.size, dtype=bool)
        mask[found] = True
        return mask

    async def _walk(self, state: Any, base: float, trie: VocabTrie) -> np.ndarray:
        """Weights prefix(x t) - base of the tokens t in ``trie``, from the byte state of x
        (-inf for the tokens not in it)."""
        out = np.full(self.size, NEG_INF)
        boolean = self.potential.boolean
        for toks, here in self._live_nodes(state, trie):
            w = (0.0 if boolean else await self.potential.state_prefix(here)) - base
            for t in toks:
                out[t] = w
        return out
