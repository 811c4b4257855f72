"""The Potential contract as an inheritable test class, for constraint authors and this project.

    from potentials.testing import PotentialContract

    class TestMyConstraint(PotentialContract):
        def potential(self): return MyConstraint()
        def contexts(self): return [b"", b"ab", b"ab1"]

Every potential's test module subclasses ``PotentialContract`` and provides ``potential()`` and
``contexts()``; pytest then runs every check below on it. For each context x (and each symbol a
with x a in the contexts' closure under one more symbol):

    prefix(x) = -inf  =>  prefix(x a) = -inf and complete(x a) = -inf
    logw_next(x)[a]   = prefix(x a) - prefix(x)
    logw_next(x)[EOS] = complete(x) - prefix(x)
    logw_subset and the batch methods equal the single versions.
    known_support(x), where not None, is the live positions of logw_next(x), all of weight 0.
    mask_would_be_kept(x) True => once logw_next(x) was computed, it is False (it was kept).

Two mixins check the claims a BytePotential may make to speed up lifting; a test class adds
them when its potential makes the claim, and its contexts must exercise it:
``MaskKeyContract`` (equal ``mask_key`` means equal liveness for every continuation; some key
must be shared by two contexts) and ``PlainTextBudgetContract`` (a ``plain_text_budget`` B
means plain text w stays alive iff it has at most B characters; some context must have one);
``PlainTextKeyContract``, ``InnerTextKeyContract`` and ``CompleteKeyContract`` check
``plain_text_key``, ``inner_text_key`` and ``complete_key`` the same way (some key must be
shared by two contexts). A byte potential's ``boolean``, ``complete_after``, ``completion``,
``final_bytes``, ``next_bytes`` and ``alternatives`` are checked by the base contract.
``potentials.contract.HOOKS`` names the check of every hook.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, Sequence

import numpy as np

from smc.core.logmath import NEG_INF
from potentials.base import BytePotential, Potential
from potentials.text import chars_begun, is_plain_text, is_raw_text

TOL = 1e-6


def _sync(check):
    """Run an async check with ``asyncio.run``, so the contract needs no pytest plugin."""

    def test(self):
        asyncio.run(check(self))

    test.__name__, test.__qualname__, test.__doc__ = check.__name__, check.__qualname__, check.__doc__
    return test


def same(a: float, b: float, tol: float = TOL) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= tol


class PotentialContract:
    #: how many non-EOS symbols to check at each context (None: all of them)
    symbols_per_context: int | None = None

    def potential(self) -> Potential:
        raise NotImplementedError

    def contexts(self) -> Sequence[Any]:
        raise NotImplementedError

    def symbols(self, pot: Potential, ctx: Any, logw: np.ndarray) -> list[int]:
        """Symbols to check at ``ctx``: every live one, then dead ones, up to the cap."""
        non_eos = [a for a in range(pot.size) if a not in pot.eos_ids]
        if self.symbols_per_context is None:
            return non_eos
        live = [a for a in non_eos if logw[a] > NEG_INF]
        dead = [a for a in non_eos if logw[a] == NEG_INF]
        rng = np.random.default_rng(0)
        k = self.symbols_per_context
        pick = list(rng.permutation(live)[:k]) + list(rng.permutation(dead)[: max(1, k // 4)])
        return [int(a) for a in pick]

    @_sync
    async def test_logw_next_matches_prefix_and_complete(self):
        pot = self.potential()
        for ctx in self.contexts():
            base = await pot.prefix(ctx)
            logw = await pot.logw_next(ctx)
            assert logw.shape == (pot.size,)
            if base == NEG_INF:
                assert np.all(logw == NEG_INF), f"dead context {ctx!r} has live next symbols"
                continue
            done = await pot.complete(ctx)
            for e in pot.eos_ids:
                assert same(logw[e], done - base), (ctx, logw[e], done, base)
            for a in self.symbols(pot, ctx, logw):
                want = await pot.prefix(pot.extend(ctx, a)) - base
                assert same(logw[a], want), (ctx, a, logw[a], want)

    @_sync
    async def test_dead_prefixes_stay_dead(self):
        pot = self.potential()
        for ctx in self.contexts():
            if await pot.prefix(ctx) != NEG_INF:
                assert await pot.complete(ctx) <= await pot.prefix(ctx) + TOL
                continue
            assert await pot.complete(ctx) == NEG_INF
            logw = await pot.logw_next(ctx)
            for a in self.symbols(pot, ctx, logw):
                longer = pot.extend(ctx, a)
                assert await pot.prefix(longer) == NEG_INF, (ctx, a)
                assert await pot.complete(longer) == NEG_INF, (ctx, a)

    @_sync
    async def test_logw_subset_matches_logw_next(self):
        pot = self.potential()
        for ctx in self.contexts():
            logw = await pot.logw_next(ctx)
            syms = self.symbols(pot, ctx, logw) + list(pot.eos_ids)
            sub = await pot.logw_subset(ctx, syms)
            for a, v in zip(syms, sub):
                assert same(v, logw[a]), (ctx, a, v, logw[a])

    @_sync
    async def test_known_support_matches_logw_next(self):
        """Where ``known_support`` answers (after the contexts' masks were computed), it is
        exactly the live positions of logw_next, each of log weight 0."""
        pot = self.potential()
        ctxs = list(self.contexts())
        rows = [await pot.logw_next(ctx) for ctx in ctxs]
        for ctx, logw in zip(ctxs, rows):
            support = await pot.known_support(ctx)
            if support is None:
                continue
            live = np.flatnonzero(logw > NEG_INF)
            assert np.asarray(support).tolist() == live.tolist(), (ctx, support, live)
            assert np.all(logw[live] == 0.0), (ctx, logw[live])

    @_sync
    async def test_mask_would_be_kept_holds_its_word(self):
        """Where ``mask_would_be_kept`` says a full evaluation would be kept, computing it
        keeps it: the hook answers False at that context afterwards."""
        pot = self.potential()
        for ctx in self.contexts():
            if await pot.mask_would_be_kept(ctx):
                await pot.logw_next(ctx)
                assert not await pot.mask_would_be_kept(ctx), ctx

    @_sync
    async def test_restored_caches_answer_alike(self):
        """``restore_caches(cache_contexts())`` on a new potential gives it the same
        ``known_support`` and ``mask_would_be_kept`` answers at every context, what a resumed
        run needs to take the steps of the uninterrupted one."""
        pot = self.potential()
        ctxs = list(self.contexts())
        for ctx in ctxs[::2]:  # some masks kept, some not
            if await pot.prefix(ctx) > NEG_INF:
                await pot.logw_next(ctx)
        saved = pot.cache_contexts()
        if saved is None:
            return
        fresh = self.potential()
        await fresh.restore_caches(saved)
        for ctx in ctxs:
            a, b = await pot.known_support(ctx), await fresh.known_support(ctx)
            assert (a is None) == (b is None), ctx
            if a is not None:
                assert np.asarray(a).tolist() == np.asarray(b).tolist(), ctx
            assert await pot.mask_would_be_kept(ctx) == await fresh.mask_would_be_kept(ctx), ctx

    @_sync
    async def test_final_bytes_end_every_complete_text(self):
        """A byte potential's ``final_bytes``, where not None, holds the last byte of every
        non-empty complete text among the contexts and their one-byte extensions."""
        pot = self.potential()
        final = pot.final_bytes() if isinstance(pot, BytePotential) else None
        if final is None:
            return
        for ctx in self.contexts():
            for text in [ctx] + [pot.extend(ctx, b) for b in range(256)]:
                if text and await pot.complete(text) > NEG_INF:
                    assert text[-1] in final, (text, final)

    def _byte_claims(self, hook: str) -> tuple[Any, list[tuple[Any, Any, Any]]]:
        """(the potential, [(context, its state, hook(state))] wherever a byte potential's
        ``hook`` answers for a live context)."""
        pot = self.potential()
        if not isinstance(pot, BytePotential):
            return pot, []
        claims = []
        for ctx in self.contexts():
            state = pot.state_of(ctx)
            claim = None if state is None else getattr(pot, hook)(state)
            if claim is not None:
                claims.append((ctx, state, claim))
        return pot, claims

    @_sync
    async def test_boolean_means_prefix_zero(self):
        """A byte potential with ``boolean`` True gives every live context prefix weight 0."""
        pot = self.potential()
        if not isinstance(pot, BytePotential) or not pot.boolean:
            return
        for ctx, state in _live_states(pot, self.contexts()):
            assert await pot.state_prefix(state) == 0.0, ctx

    @_sync
    async def test_complete_after_is_complete_of_advance(self):
        """A byte potential's ``complete_after(state, w)`` is state_complete(advance(state, w)),
        -inf where that state is dead, for the empty w and the one-byte and plain probes."""
        pot = self.potential()
        if not isinstance(pot, BytePotential):
            return
        for ctx, state in _live_states(pot, self.contexts()):
            for w in [b""] + PLAIN_PROBES[:4] + [b"0", b'"', b"}", b"]", b"\xff"]:
                nxt = pot.advance(state, w)
                want = NEG_INF if nxt is None else await pot.state_complete(nxt)
                assert same(await pot.complete_after(state, w), want), (ctx, w)

    @_sync
    async def test_completion_is_accepted(self):
        """A byte potential's ``completion(state)``, where not None, is a y that completes the
        text: complete_after(state, y) > -inf."""
        pot, claims = self._byte_claims("completion")
        for ctx, state, y in claims:
            assert await pot.complete_after(state, y) > NEG_INF, (ctx, y)

    def test_committed_is_written_next(self):
        """A byte potential's ``committed(state)``, where not empty, is what every accepted
        continuation writes next: no byte keeps the state alive but its first one or, inside
        a string, a backslash that begins an escape spelling it; and the completion, where
        known, begins with it."""
        pot, claims = self._byte_claims("committed")
        for ctx, state, rest in claims:
            if not rest:
                continue
            for b in range(256):
                if pot.advance(state, bytes((b,))) is not None:
                    assert b in (rest[0], ord("\\")), (ctx, b, rest)
            y = pot.completion(state)
            assert y is None or y.startswith(rest), (ctx, y, rest)

    def test_next_bytes_hold_every_live_byte(self):
        """A byte potential's ``next_bytes``, where not None, holds every byte b after which
        the state of each (live) context stays alive."""
        pot, claims = self._byte_claims("next_bytes")
        for ctx, state, allowed in claims:
            allowed = set(allowed)
            for b in range(256):
                if pot.advance(state, bytes((b,))) is not None:
                    assert b in allowed, (ctx, b, sorted(allowed))

    def test_alternatives_share_the_future(self):
        """A byte potential's ``alternatives``, where given: a continuation (every byte, and
        longer probes) keeps the state alive iff it keeps some alternative alive."""
        pot, claims = self._byte_claims("alternatives")
        for ctx, state, parts in claims:
            for w in OTHER_PROBES + PLAIN_PROBES:
                alive = pot.advance(state, w) is not None
                assert alive == any(pot.advance(p, w) is not None for p in parts), (ctx, w)

    @_sync
    async def test_batch_methods_match_single(self):
        pot = self.potential()
        ctxs = list(self.contexts())
        pre = await pot.batch_prefix(ctxs)
        com = await pot.batch_complete(ctxs)
        nxt = await pot.batch_logw_next(ctxs)
        assert nxt.shape == (len(ctxs), pot.size)
        for i, ctx in enumerate(ctxs):
            assert same(pre[i], await pot.prefix(ctx))
            assert same(com[i], await pot.complete(ctx))
            single = await pot.logw_next(ctx)
            assert all(same(x, y) for x, y in zip(nxt[i], single))


#: plain text of 1 to 50 characters: ASCII, 2-, 3- and 4-byte characters, DEL
PLAIN_PROBES = [b"a", b"ab", b" x", "é".encode(), "日本".encode(), "😀!".encode(), b"\x7f",
                b"hello world", b"y" * 20, b"0123456789" * 5]
#: raw text: the plain probes and text cut inside its last character
RAW_PROBES = PLAIN_PROBES + [b"\xc3", "日本".encode()[:4], b"ab\xe6\x97", "😀".encode()[:3],
                             b"\xed\x9f", b"c\xf4\x8f"]
#: continuations that are not plain text, for the mask_key check
OTHER_PROBES = [bytes((b,)) for b in range(256)] + [b'",', b'"}', b'"]', b"\\n", b"1,", b"]}",
                                                     "é".encode()[:1], b'a"', b"\n\t"]


def _live_states(pot: BytePotential, contexts: Sequence[bytes]) -> list[tuple[bytes, Any]]:
    return [(ctx, state) for ctx in contexts if (state := pot.state_of(ctx)) is not None]


def _agree_per_key(by_key: dict[Any, list[tuple[Any, Any]]], missing: str) -> None:
    """Every group of contexts sharing a key observed the same thing; some key is shared."""
    shared = [group for group in by_key.values() if len(group) > 1]
    assert shared, missing
    for group in shared:
        for ctx, seen in group[1:]:
            assert seen == group[0][1], (group[0][0], ctx)


class PlainTextBudgetContract(PotentialContract):
    """The contract plus ``plain_text_budget``'s claim (see the module docstring)."""

    @_sync
    async def test_plain_text_budget_holds(self):
        pot = self.potential()
        assert all(is_plain_text(w) for w in PLAIN_PROBES)
        claims = [(ctx, state, pot.plain_text_budget(state))
                  for ctx, state in _live_states(pot, self.contexts())]
        claims = [c for c in claims if c[2] is not None]
        assert claims, "no context has a plain_text_budget: add one inside free text"
        for ctx, state, budget in claims:
            assert budget >= 0, (ctx, budget)
            for w in PLAIN_PROBES:
                alive = pot.advance(state, w) is not None
                assert alive == (len(w.decode()) <= budget), (ctx, w, budget)


class PlainTextKeyContract(PotentialContract):
    """The contract plus ``plain_text_key``'s claim: for raw text w (plain text, or text cut
    inside its last character), liveness is (w begins at most B characters) and L_k(w), so two
    states with the same key k agree on every w short enough for both budgets, a state's own
    budget is never exceeded, and ``plain_text_automata``, where given, is L_k."""

    @_sync
    async def test_plain_text_key_holds(self):
        pot = self.potential()
        assert all(is_raw_text(w) for w in RAW_PROBES)
        by_key: dict[Any, list[tuple[bytes, Any, float]]] = {}
        for ctx, state in _live_states(pot, self.contexts()):
            split = pot.plain_text_key(state)
            if split is not None:
                key, budget = split
                assert budget >= 0, (ctx, budget)
                for w in RAW_PROBES:
                    if chars_begun(w) > budget:
                        assert pot.advance(state, w) is None, (ctx, w, budget)
                by_key.setdefault(key, []).append((ctx, state, budget))
        shared = [group for group in by_key.values() if len(group) > 1]
        assert shared, "no two contexts share a plain_text_key: add contexts inside one string"
        for group in shared:
            for w in RAW_PROBES:
                fits = [(ctx, pot.advance(st, w) is not None) for ctx, st, b in group
                        if chars_begun(w) <= b]
                assert len({alive for _, alive in fits}) <= 1, (w, fits)
        for key, group in by_key.items():
            automata = pot.plain_text_automata(key)
            if automata is None:
                continue
            for ctx, state, budget in group:
                for w in RAW_PROBES:
                    if chars_begun(w) <= budget:
                        in_l = any(all(a.walk(q, w) is not None for a, q in alt) for alt in automata)
                        assert in_l == (pot.advance(state, w) is not None), (ctx, w)


class InnerTextKeyContract(PotentialContract):
    """The contract plus ``inner_text_key``'s claim: states with the same key agree on the
    liveness of every continuation without a stop byte, and none of those completes the text."""

    @_sync
    async def test_equal_inner_text_keys_have_equal_liveness(self):
        pot = self.potential()
        by_key: dict[Any, list[tuple[bytes, tuple[bool, ...]]]] = {}
        for ctx, state in _live_states(pot, self.contexts()):
            got = pot.inner_text_key(state)
            if got is not None:
                key, stop = got
                probes = [w for w in OTHER_PROBES + PLAIN_PROBES if not any(b in stop for b in w)]
                alive = tuple(pot.advance(state, w) is not None for w in probes)
                for w in [b""] + probes:
                    assert await pot.complete_after(state, w) == NEG_INF, (ctx, w)
                by_key.setdefault(key, []).append((ctx, alive))
        _agree_per_key(by_key, "no two contexts share an inner_text_key: add contexts inside strings")


class MaskKeyContract(PotentialContract):
    """The contract plus ``mask_key``'s claim (see the module docstring)."""

    @_sync
    async def test_equal_mask_keys_have_equal_liveness(self):
        pot = self.potential()
        by_key: dict[Any, list[tuple[Any, tuple[bool, ...]]]] = {}
        for ctx, state in _live_states(pot, self.contexts()):
            key = pot.mask_key(state)
            if key is not None:
                alive = tuple(pot.advance(state, w) is not None for w in OTHER_PROBES + PLAIN_PROBES)
                by_key.setdefault(key, []).append((ctx, alive))
        _agree_per_key(by_key, "no two contexts share a mask_key: add contexts that reach one state")


class CompleteKeyContract(PotentialContract):
    """The contract plus ``complete_key``'s claim: states with the same key agree on
    whether every continuation completes the text."""

    @_sync
    async def test_equal_complete_keys_agree_on_completion(self):
        pot = self.potential()
        by_key: dict[Any, list[tuple[Any, tuple[bool, ...]]]] = {}
        for ctx, state in _live_states(pot, self.contexts()):
            key = pot.complete_key(state)
            if key is not None:
                done = tuple([await pot.complete_after(state, w) > NEG_INF
                              for w in [b""] + OTHER_PROBES + PLAIN_PROBES])
                by_key.setdefault(key, []).append((ctx, done))
        _agree_per_key(by_key, "no two contexts share a complete_key: add contexts that reach one state")
