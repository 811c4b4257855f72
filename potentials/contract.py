"""The Potential contract, and the product that its ``*`` builds.

A potential phi gives a non-negative weight to sequences over its vocabulary; everything is kept
in log space. With x a context, a a symbol and EOS the end of the sequence:

    prefix(x)          = log sum_{y} phi(x y)        (Boolean: 0 if x can still be completed, else -inf)
    complete(x)        = log phi(x)                  (x as a finished sequence)
    logw_next(x)[a]    = prefix(x a) - prefix(x)
    logw_next(x)[EOS]  = complete(x) - prefix(x)

``logw_next`` returns a float64 vector of length ``size``; the positions ``eos_ids`` stand for EOS.
Byte-level potentials (constraints over text) have ``size == 257``: one entry per byte value and
EOS at 256; their contexts are ``bytes``. Token-level potentials (LMs, lifted constraints) use the
LM's token ids, its EOS ids among them; their contexts are tuples of ints.

Contract (``potentials.testing`` checks it for every potential):
prefix(x) = -inf implies prefix(x y) = complete(x y) = -inf; the two identities above; and every
batch method equals its single version.

This module is the bottom of the package: lifting (potentials.lift) and every constraint build
on it, and it imports none of them. Its byte-level class is ``ByteContract``; the class to
subclass is ``potentials.base.BytePotential``, the contract with its operators (``lift``, and
``*`` between byte potentials), which need lifting and so sit above it.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import Any, Collection, Generic, Hashable, NamedTuple, Sequence, TypeVar

import numpy as np

from smc.core.logmath import NEG_INF
Context = Any  # bytes for byte-level potentials, tuple[int, ...] for token-level ones


class Potential(ABC):
    """A weight on sequences, queried by prefix, by completion, and by next symbol."""

    #: shared by all particles of an SMC run: never copied when a particle is cloned, and named
    #: (not pickled) in a checkpoint's particles (smc.model.is_shared)
    shared_by_particles = True

    #: length of the ``logw_next`` vector
    size: int
    #: positions in that vector which stand for EOS
    eos_ids: tuple[int, ...]

    def extend(self, ctx: Context, symbol: int) -> Context:
        """The context ``ctx`` followed by ``symbol`` (a non-EOS position of ``logw_next``)."""
        return tuple(ctx) + (int(symbol),)

    def empty(self) -> Context:
        return ()

    @abstractmethod
    async def prefix(self, ctx: Context) -> float: ...

    @abstractmethod
    async def complete(self, ctx: Context) -> float: ...

    async def logw_next(self, ctx: Context) -> np.ndarray:
        """Vector of prefix(ctx a) - prefix(ctx) for every symbol a; complete - prefix at EOS."""
        return await self.logw_subset(ctx, range(self.size))

    async def logw_subset(self, ctx: Context, symbols: Sequence[int]) -> np.ndarray:
        """``logw_next(ctx)`` at the given positions only (what a rejection sampler checks)."""
        base = await self.prefix(ctx)
        out = np.full(len(symbols), NEG_INF)
        if base == NEG_INF:
            return out
        eos = set(self.eos_ids)
        done: float | None = None
        for k, a in enumerate(symbols):
            if a in eos:
                if done is None:
                    done = await self.complete(ctx)
                out[k] = done - base
            else:
                out[k] = await self.prefix(self.extend(ctx, a)) - base
        return out

    async def known_support(self, ctx: Context) -> np.ndarray | None:
        """The sorted positions A = {a : logw_next(ctx)[a] > -inf} (EOS included), when every
        one of them has log weight exactly 0 and A is known without computing ``logw_next``
        (e.g. a cached mask); else None. Samplers may then use the exact local mass
        sum_{a in A} p(a) instead of estimating it. Default: None (never known).
        """
        return None

    def cache_contexts(self) -> Any:
        """What the answers of ``known_support`` and ``mask_would_be_kept`` depend on besides
        the context (caches filled by earlier calls), in a picklable form that
        ``restore_caches`` takes back; None when they depend on nothing else (the default).
        A sampler's step follows these answers (samplers.awrs), so a checkpoint stores this
        and resume restores it: the resumed run then takes the steps the uninterrupted run
        took (docs/checkpoint.md)."""
        return None

    async def restore_caches(self, saved: Any) -> None:
        """Fill the caches again from a ``cache_contexts()`` value of an equal potential."""

    async def mask_would_be_kept(self, ctx: Context) -> bool:
        """True when ``logw_next(ctx)`` is not known yet and, once computed, is kept for every
        later context that shares its key (e.g. a lifted Boolean constraint's mask cache): one
        full evaluation then serves all particles at that key, so a sampler whose first token
        checks at ``ctx`` are all rejected may compute it at once instead of checking on. A
        hint about cost only: either answer leaves every sampler properly weighted. Default:
        False.
        """
        return False

    async def batch_prefix(self, ctxs: Sequence[Context]) -> np.ndarray:
        return np.array(await asyncio.gather(*(self.prefix(c) for c in ctxs)), dtype=float)

    async def batch_complete(self, ctxs: Sequence[Context]) -> np.ndarray:
        return np.array(await asyncio.gather(*(self.complete(c) for c in ctxs)), dtype=float)

    async def batch_logw_next(self, ctxs: Sequence[Context]) -> np.ndarray:
        rows = await asyncio.gather(*(self.logw_next(c) for c in ctxs))
        return np.stack(rows) if rows else np.empty((0, self.size))

    def factors(self) -> tuple["Potential", ...]:
        """The leaf potentials whose product this is, in order: (self,) for a leaf; a product
        gives its factors' factors, a lifted potential its byte potential's."""
        return (self,)

    def __mul__(self, other: "Potential") -> "Potential":
        """The product (``Product``); two byte potentials make a ``ByteProduct`` instead
        (``BytePotential.__mul__``)."""
        if not isinstance(other, Potential):
            raise TypeError(f"cannot multiply a potential by {type(other).__name__}")
        return Product(self, other)


S = TypeVar("S")


class Hook(NamedTuple):
    claim: str  #: what the member promises when it answers (a wrong claim changes results)
    use: str  #: what lifting or a twist does with the answer
    check: str | None  #: the check in potentials.testing that verifies it (None: none can)


#: The members every ``ByteContract`` implements (abstract here).
REQUIRED: dict[str, str] = {
    "initial()": "the state of the empty text",
    "advance(state, data)": "the state after the bytes data, None once no continuation is "
                            "accepted; states are persistent and a call costs O(len(data))",
    "state_complete(state)": "log φ(x) of the text x that reached the state",
}

#: The optional members, each stated once: its claim, its use, and the shipped check of
#: potentials.testing that verifies it. docs/design.md ("Potentials") shows this table, and
#: tests/potentials/test_layout.py keeps the two alike.
HOOKS: dict[str, Hook] = {
    "state_prefix(state)": Hook(
        "log Σ_y φ(x y) of a live state (default 0)",
        "the prefix weight of a context",
        "PotentialContract.test_logw_next_matches_prefix_and_complete"),
    "boolean": Hook(
        "every live state has prefix weight 0",
        "a mask of 0 / -inf: liveness alone decides a token",
        "PotentialContract.test_boolean_means_prefix_zero"),
    "complete_after(state, data)": Hook(
        "state_complete(advance(state, data)), -inf when that state is dead",
        "the last-step check of one token without building its state",
        "PotentialContract.test_complete_after_is_complete_of_advance"),
    "mask_key(state)": Hook(
        "equal keys have equal futures: advance(s, d) is None iff advance(s', d) is None",
        "one mask per key, shared by particles",
        "MaskKeyContract.test_equal_mask_keys_have_equal_liveness"),
    "next_bytes(state)": Hook(
        "a superset of the bytes that keep the state alive",
        "at trie nodes with 16+ children, descends only into those (JSON between values: ~20 of"
        " 235 root children)",
        "PotentialContract.test_next_bytes_hold_every_live_byte"),
    "alternatives(state)": Hook(
        "the state's futures are the union of these states' futures",
        "a state with no shortcut of its own, whose alternatives all have an inner_text_key: "
        "the tokens with a stop byte walked once from the whole state, the others as the union "
        "of each alternative's, kept per inner key (a JSON string that may be one of several "
        "enum values or free text)",
        "PotentialContract.test_alternatives_share_the_future"),
    "plain_text_budget(state)": Hook(
        "plain text (potentials.text) lives iff it has at most B characters",
        "plain tokens decided by one vectorized comparison",
        "PlainTextBudgetContract.test_plain_text_budget_holds"),
    "plain_text_key(state)": Hook(
        "raw text (plain, or cut inside its last character) lives iff it begins at most B "
        "characters and L_k holds, L_k a function of the key k",
        "L_k over the plain tokens computed once per key",
        "PlainTextKeyContract.test_plain_text_key_holds"),
    "plain_text_automata(k)": Hook(
        "L_k as automata (walk, optionally char_table)",
        "L_k from dense character tables over a per-LM character trie of the plain tokens (one "
        "array gather per depth), and for the raw tokens of an inner walk from the automata "
        "alone",
        "PlainTextKeyContract.test_plain_text_key_holds"),
    "inner_text_key(state)": Hook(
        "texts without a stop byte live alike under equal keys, and none completes the text",
        "those walked once per key; each mask walks only tokens with a stop byte (JSON: every "
        "string state has one, enum literals and escapes included)",
        "InnerTextKeyContract.test_equal_inner_text_keys_have_equal_liveness"),
    "shares_text_keys": Hook(
        "the two text keys mean the same in every instance of the class",
        "their caches kept per LM and class, shared by all such potentials",
        None),
    "complete_key(state)": Hook(
        "equal keys accept alike after every continuation",
        "the ending set of the step before a forced EOS, once per key (docs/engine.md)",
        "CompleteKeyContract.test_equal_complete_keys_agree_on_completion"),
    "final_bytes()": Hook(
        "the bytes a non-empty complete text can end with (a superset)",
        "the last-step check tries only tokens ending in one of them",
        "PotentialContract.test_final_bytes_end_every_complete_text"),
    "completion(state)": Hook(
        "a y that completes the text, a function of the state",
        "the lookahead twist's y; the budget twist's m (its length)",
        "PotentialContract.test_completion_is_accepted"),
    "completion_key(state)": Hook(
        "(a heuristic grouping of states needing equally long completions)",
        "read only by the budget twist",
        None),
    "committed(state)": Hook(
        "the bytes every accepted continuation writes next, the rest of a literal begun",
        "resampling never drops a particle inside a literal it has begun (the budget twist's holds)",
        "PotentialContract.test_committed_is_written_next"),
}


class ByteContract(Potential, Generic[S]):
    """A potential over UTF-8 bytes driven by an incremental state (subclass its public face,
    ``potentials.base.BytePotential``).

    Subclasses implement a persistent (never mutated, shareable) state machine:

        initial()             state of the empty context
        advance(state, data)  state after the bytes ``data``, or None once the prefix is dead;
                              costs O(len(data)), independent of how long the prefix already is
        state_prefix(state)   prefix log weight of a live state (default 0: Boolean constraint)
        state_complete(state) complete log weight

    Every query follows from these; lifting to a token vocabulary (``BytePotential.lift``) keeps
    one state per particle and advances it over each candidate token's bytes only. The optional
    members below let lifting do less; ``HOOKS`` states each one's claim, use and check.
    """

    size = 257
    eos_ids = (256,)
    #: True when every live state has prefix weight 0, so viability alone decides prefix().
    boolean: bool = True
    #: True when an equal ``plain_text_key`` or ``inner_text_key`` means the same liveness in
    #: every instance of the class (the keys hold no per-instance object, or hold it by
    #: identity), so that lifting keeps what those keys cache once per LM and class, shared
    #: by all such potentials, instead of once per potential.
    shares_text_keys: bool = False

    def extend(self, ctx: bytes, symbol: int) -> bytes:
        return bytes(ctx) + bytes((int(symbol),))

    def empty(self) -> bytes:
        return b""

    @abstractmethod
    def initial(self) -> S: ...

    @abstractmethod
    def advance(self, state: S, data: bytes) -> S | None: ...

    async def state_prefix(self, state: S) -> float:
        return 0.0

    @abstractmethod
    async def state_complete(self, state: S) -> float: ...

    async def complete_after(self, state: S, data: bytes) -> float:
        """state_complete(advance(state, data)), -inf when that state is dead; a potential may
        answer without building the state (``Regex`` on its fallback skips the prefix checks,
        which a complete text passes anyway)."""
        nxt = self.advance(state, data)
        return NEG_INF if nxt is None else await self.state_complete(nxt)

    def mask_key(self, state: S) -> Hashable | None:
        """A hashable key k(state) with: k(s) == k(s') implies, for every byte string d,
        advance(s, d) is None iff advance(s', d) is None -- or None when there is no cheap one.

        A Boolean potential's next-token mask depends on the key only, so lifting computes one
        mask per key and shares it between particles (default: None, no sharing).
        """
        return None

    def completion_key(self, state: S) -> Hashable | None:
        """A hashable key under which states are taken to need equally long completions.

        Only heuristics read it (the budget twist, smc.twists, remembers completion lengths
        under it), never a weight, so it may be coarser than ``mask_key``: it needs to group
        states whose shortest accepted completions are about as long. Default: ``mask_key``.
        """
        return self.mask_key(state)

    def completion(self, state: S) -> bytes | None:
        """A short y with state_complete(advance(state, y)) > -inf, where one is known cheaply;
        else None (the default).

        Only twists read it (potentials.lookahead's y, smc.engine.critics' m), and a run's
        target does not depend on it, so it may be any accepted completion; it must be a
        function of the state.
        """
        return None

    def committed(self, state: S) -> bytes:
        """Bytes that every accepted continuation of ``state`` writes next *because the text
        has begun them* (the rest of a literal one of whose characters is written; inside a
        string, an escape may spell them), where known cheaply; b"" (the default) otherwise.

        Only the engine's resampling reads it (smc.engine.critics: a particle inside a literal
        it has begun is not dropped before it has written it), never a weight, so a wrong
        answer costs efficiency, not correctness; ``potentials.testing`` checks it.
        """
        return b""

    def complete_key(self, state: S) -> Hashable | None:
        """A hashable key k(state) with: k(s) == k(s') implies, for every byte string d,
        complete after d from s == complete after d from s' -- or None when there is none.

        A DFA's state is one; a JSON document's configurations are not (its final check
        reads the whole text). Lifting then computes, once per key, which tokens finish the
        text (the step before a forced EOS, potentials.last_step). Default: None.
        """
        return None

    def final_bytes(self) -> bytes | None:
        """The bytes a non-empty complete text can end with (a superset is fine), or None
        when any byte may. Lifting then checks only the tokens ending in one of them for
        whether they finish the text (potentials.last_step). Default: None.
        """
        return None

    def next_bytes(self, state: S) -> Collection[int] | None:
        """A superset of { b : advance(state, bytes([b])) is not None }, or None when any byte
        may follow.

        Lifting descends, at trie nodes with many children (the root: ~235 first bytes), only
        into the children whose first byte is in it, instead of trying each: between JSON
        values, where about 20 bytes can follow, that skips most of a mask's trie nodes.
        It must be cheap (a lookup per state). Default: None.
        """
        return None

    def alternatives(self, state: S) -> Sequence[S] | None:
        """None, or states s_1 .. s_m whose futures together are this state's: for every byte
        string w, advance(state, w) is not None iff advance(s_i, w) is not None for some i.

        Lifting then takes a Boolean potential's mask as the union of the alternatives' masks,
        each through its own shortcuts (``plain_text_budget``, ``plain_text_key``) and its own
        ``mask_key``: a JSON string that may be an enum value or free text is two cheap masks,
        not one walk of the whole vocabulary. Default: None.
        """
        return None

    def plain_text_budget(self, state: S) -> float | None:
        """None, or B >= 0 (inf allowed) such that for every *plain text* w -- complete UTF-8
        characters, none of them a control character, '"' or '\\'
        (``potentials.text.is_plain_text``) -- advance(state, w) is not None iff w has at most
        B characters.

        Inside free text (a JSON string with only length limits) this lets lifting decide the
        plain tokens, nearly all of an LM's vocabulary, in one vectorized comparison.
        Default: None (no such bound is known).
        """
        return None

    def plain_text_key(self, state: S) -> tuple[Hashable, float] | None:
        """None, or (k, B) with B >= 0 (inf allowed) such that for every raw text w
        (``potentials.text.is_raw_text``; plain text among it): advance(state, w) is not None
        iff w begins at most B characters (``chars_begun``) and L_k(w), where the predicate L_k
        depends on the key k only (states with equal keys agree on it). ``plain_text_budget``
        is the case L_k = True, for plain text.

        Inside a string with a ``pattern`` (L_k: the pattern's automaton, in state k, survives
        w) lifting then computes the plain tokens' L_k once per key and reuses it, whatever
        the budget. Default: None.
        """
        return None

    def plain_text_automata(self, key: Hashable) -> Sequence[Sequence[tuple[Any, Any]]] | None:
        """None, or L_k of a ``plain_text_key`` k as automata: alternatives, each a sequence
        of (automaton, its state), with

            L_k(w)  iff  for some alternative, a.walk(q, w) is not None for every (a, q) in it

        (``a.walk(q, w)``: the state after the bytes w, None once no continuation can match,
        as ``potentials.regex.automaton.ByteDFA.walk``). Lifting then walks the plain tokens through
        those automata alone, instead of through ``advance``. Default: None.
        """
        return None

    def inner_text_key(self, state: S) -> tuple[Hashable, bytes] | None:
        """None, or (k, stop) such that for every byte string w containing no byte of ``stop``:
        advance(state, w) is None iff advance(s', w) is None, for every state s' with the same
        key k, and the text after w is not complete. Inside a JSON string (stop = the quote)
        the bytes of such a w never leave the string, so whether it lives depends on the
        string's own checks only, not on the document around it, and the document stays open;
        lifting then walks the non-plain tokens without a stop byte once per key and only
        those with one per mask, and looks for tokens that finish the text only among those
        with a stop byte. Default: None.
        """
        return None

    def state_of(self, ctx: bytes) -> S | None:
        return self.advance(self.initial(), bytes(ctx)) if ctx else self.initial()

    async def prefix(self, ctx: bytes) -> float:
        state = self.state_of(ctx)
        return NEG_INF if state is None else await self.state_prefix(state)

    async def complete(self, ctx: bytes) -> float:
        state = self.state_of(ctx)
        return NEG_INF if state is None else await self.state_complete(state)

    async def logw_next(self, ctx: bytes) -> np.ndarray:
        out = np.full(257, NEG_INF)
        state = self.state_of(ctx)
        if state is None:
            return out
        base = await self.state_prefix(state)
        if base == NEG_INF:
            return out
        for b in range(256):
            nxt = self.advance(state, bytes((b,)))
            if nxt is not None:
                out[b] = await self.state_prefix(nxt) - base
        out[256] = await self.state_complete(state) - base
        return out


class Product(Potential):
    """Product of two potentials over the same vocabulary (same ``size`` and ``eos_ids``): log
    weights add,

        prefix_{a*b}(x) = prefix_a(x) + prefix_b(x)    complete_{a*b}(x) = complete_a(x) + complete_b(x)

    so logw_next adds too. (For weighted factors ``prefix`` is the sum of the factors' prefix
    weights, the usual SMC twist, not the log of the product's own sum over completions.)
    """

    def __init__(self, a: Potential, b: Potential):
        if a.size != b.size or tuple(a.eos_ids) != tuple(b.eos_ids):
            hint = ""
            if isinstance(a, ByteContract) != isinstance(b, ByteContract):
                hint = "; lift the byte-level one to the LM's tokens first: potential.lift(lm)"
            raise ValueError(
                f"cannot multiply {a!r} (size {a.size}, EOS {tuple(a.eos_ids)}) by {b!r} "
                f"(size {b.size}, EOS {tuple(b.eos_ids)}): they are over different vocabularies"
                + hint)
        self.a, self.b = a, b
        self.size, self.eos_ids = a.size, tuple(a.eos_ids)

    def __repr__(self) -> str:
        return f"({self.a!r} * {self.b!r})"

    def factors(self) -> tuple[Potential, ...]:
        return self.a.factors() + self.b.factors()

    def extend(self, ctx: Any, symbol: int) -> Any:
        return self.a.extend(ctx, symbol)

    def empty(self) -> Any:
        return self.a.empty()

    async def prefix(self, ctx: Any) -> float:
        wa = await self.a.prefix(ctx)
        return NEG_INF if wa == NEG_INF else wa + await self.b.prefix(ctx)

    async def complete(self, ctx: Any) -> float:
        wa = await self.a.complete(ctx)
        return NEG_INF if wa == NEG_INF else wa + await self.b.complete(ctx)

    async def logw_next(self, ctx: Any) -> np.ndarray:
        wa = await self.a.logw_next(ctx)
        if np.all(wa == NEG_INF):
            return wa
        return wa + await self.b.logw_next(ctx)

    async def logw_subset(self, ctx: Any, symbols: Sequence[int]) -> np.ndarray:
        wa = await self.a.logw_subset(ctx, symbols)
        live = np.flatnonzero(wa > NEG_INF)
        if len(live):  # b is asked only about the symbols a keeps
            wa[live] += await self.b.logw_subset(ctx, [symbols[i] for i in live])
        return wa
