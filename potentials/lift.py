"""Lifting a byte-level potential to an LM's token vocabulary.

With V the LM's vocabulary (token id -> bytes) and phi a BytePotential, the lifted potential on
token sequences x = (x_1 .. x_n) is

    prefix(x)   = phi.prefix(V[x_1] ... V[x_n])
    complete(x) = phi.complete(V[x_1] ... V[x_n])

EOS tokens end the sequence (their position in logw_next carries complete - prefix); special
(control) tokens other than EOS and tokens with no bytes never stand for text: weight 0 (-inf).

Each context's byte-level state is memoized (bounded, oldest evicted first), so checking token
t after context x advances the state of x over V[t] only: O(len(V[t])), whatever the length of
x. ``logw_next`` walks a byte trie of the whole vocabulary (potentials.vocab) from the state of
x, skipping every subtree whose shared bytes already kill the prefix; where the potential gives
``next_bytes``, trie nodes with many children are descended only through the bytes it allows.
For Boolean potentials the resulting mask is shared by states with equal ``mask_key``; inside
text (a JSON string) the ``plain_text_*`` and ``inner_text_key`` hooks let the mask be assembled
from per-key caches instead of a walk (potentials.lift_text, ``Lifted.text_masks``). Masks of at
most ``support_limit`` allowed tokens also keep their token ids (``known_support``), so a
sampler at such a state needs no checks.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np

# the contract, not potentials.base: BytePotential.lift there builds a Lifted
from smc.core.logmath import NEG_INF
from potentials.contract import ByteContract, Potential
from smc.core.errors import InvalidArgument, InvalidArgumentType
from potentials.lift_text import TextMasks
from potentials.vocab import VocabTrie, last_bytes, per_lm, stop_tokens, vocab_trie

if TYPE_CHECKING:  # annotations only: potentials need nothing of smc at run time
    from smc.backends.base import LMBackend

_MISSING = object()


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
        # a Boolean potential's next-token mask depends on its state's mask_key only (a regex's
        # DFA state, a JSON recognizer's configurations): one mask per key, shared by particles
        self._masks: OrderedDict[Any, np.ndarray] = OrderedDict()
        self.mask_cache_size = 256
        # the allowed non-EOS tokens of the cached masks with at most support_limit of them, and
        # the same with the EOS ids added, for states where the text may end (known_support):
        # samplers then need no constraint checks at such a state
        self._supports: dict[Any, tuple[np.ndarray, np.ndarray]] = {}
        self.support_limit = 4096
        # mask_key -> a token context whose state has it (what ``cache_contexts`` stores)
        self._mask_contexts: dict[Any, tuple[int, ...]] = {}
        self.stats = {"tokens_checked": 0, "trie_nodes_visited": 0, "state_cache_hits": 0,
                      "state_cache_misses": 0, "mask_cache_hits": 0}
        # inside text (a JSON string) the mask is assembled from per-key caches of the plain
        # and inner tokens (potentials.lift_text); elsewhere it is a walk of the trie
        self.text_masks = TextMasks(potential, lm, self.size, self.stats, self._lm_table,
                              self._walk_mask, self._full_trie)
        # complete_key k -> the tokens after which the text can end (``last_step_mask``)
        self._last_step_masks: OrderedDict[Any, np.ndarray] = OrderedDict()
        self._last_step_contexts: dict[Any, tuple[int, ...]] = {}
        self._final: np.ndarray | None = None
        self._root_live: bool | None = None

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
            out[await self._cached_mask(state, ctx)] = 0.0
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

    async def last_step_mask(self, ctx: Sequence[int], cheap: bool = False) -> np.ndarray | None:
        """The sorted non-EOS token ids t with complete(ctx t) > -inf (the tokens after which
        a forced EOS keeps the text: potentials.last_step).

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
            got = self._last_step_masks.get(key)
            if got is None:
                if cheap:
                    return None
                got = self._last_step_masks[key] = await self._last_step_walk(state)
                self._last_step_contexts[key] = tuple(ctx)
                if len(self._last_step_masks) > self.mask_cache_size:
                    self._last_step_contexts.pop(self._last_step_masks.popitem(last=False)[0])
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

    async def _last_step_walk(self, state: Any) -> np.ndarray:
        """The trie walk of ``_walk`` from ``state``, keeping the tokens whose state accepts."""
        state_complete = self.potential.state_complete
        keep: list[int] = []
        for toks, here in self._live_nodes(state, self._full_trie()):
            if await state_complete(here) > NEG_INF:
                keep.extend(toks)
        return np.asarray(sorted(keep), dtype=np.int64)

    async def _cached_mask(self, state: Any, ctx: Sequence[int]) -> np.ndarray:
        """``_mask(state)``, kept per ``mask_key`` (with the allowed ids of small masks), for
        the token context ``ctx`` whose state it is."""
        key = self.potential.mask_key(state)
        mask = None if key is None else self._masks.get(key)
        if mask is not None:
            self._masks.move_to_end(key)
            self.stats["mask_cache_hits"] += 1
            return mask
        mask = await self.text_masks.mask(state)
        if key is not None:
            self._masks[key] = mask
            self._mask_contexts[key] = tuple(ctx)  # a copy, made for a new mask only: the caller may extend ctx
            allowed = np.flatnonzero(mask)
            if len(allowed) <= self.support_limit:
                self._supports[key] = (allowed, np.union1d(allowed, self.eos_ids))
            if len(self._masks) > self.mask_cache_size:
                old = self._masks.popitem(last=False)[0]
                self._supports.pop(old, None)
                del self._mask_contexts[old]
        return mask

    def cache_contexts(self) -> dict[str, list[tuple[int, ...]]]:
        """For each kept mask and last-step mask, oldest (least recently used) first, a token
        context whose state has its key: what ``known_support``, ``mask_would_be_kept`` and
        ``last_step_mask(cheap=True)`` depend on besides the context."""
        return {"masks": [self._mask_contexts[k] for k in self._masks],
                "last_step": [self._last_step_contexts[k] for k in self._last_step_masks]}

    async def restore_caches(self, saved: dict[str, list[tuple[int, ...]]]) -> None:
        """Compute the masks of ``cache_contexts()``'s contexts again, in its order, so the
        caches hold the same keys in the same order (the masks are functions of their keys)."""
        for ctx in saved["masks"]:
            state, base = await self._base(ctx)
            if base > NEG_INF:
                await self._cached_mask(state, ctx)
        for ctx in saved["last_step"]:
            await self.last_step_mask(ctx)

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
        self.text_masks.build_tables()

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


def as_token_potential(constraint: Potential | None, lm: LMBackend) -> Potential | None:
    """A token-level potential for ``lm``: a byte-level constraint lifted, a token-level one
    checked against the vocabulary, None kept; InvalidArgument(Type) naming a mismatch."""
    if constraint is None:
        return None
    if isinstance(constraint, ByteContract):
        return Lifted(constraint, lm)
    if not isinstance(constraint, Potential):
        raise InvalidArgumentType(
            f"constraint must be a Potential (e.g. potentials.Regex), got {type(constraint).__name__}"
        )
    if constraint.size != len(lm.vocab):
        raise InvalidArgument(
            f"constraint has {constraint.size} symbols but the LM vocabulary has {len(lm.vocab)} "
            "tokens: pass a byte-level constraint or one lifted to this LM"
        )
    return constraint
