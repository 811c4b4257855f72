"""Twists (critics) for ``smc.generate(..., critic=...)`` that steer resampling toward
particles able to finish within the token budget.

A critic psi(x) > 0 multiplies a particle's weight for resampling only and is removed before
the next step and at finish (smc.engine), so the target pi and the unbiasedness of Ẑ do not
depend on it: it only moves particles. It helps when psi(x) tracks the chance that x can still
end (EOS) within the tokens it has left, which the per-step weights ignore until the forced EOS at
``max_tokens`` gives weight 0 to an unfinished document.

``BudgetCritic``:

    psi(x) = -m(x) * (per_byte + rate / max(r(x), 1))

    m(x) = the length of an accepted completion of x: the shortest one when a breadth-first
           search over the constraint's byte states finds it within a few expansions, else
           the constraint's own completion where it knows one (``completion(state)``: a
           JSONSchema closes what is open and writes the required keys still missing with
           short values, potentials.json), else the one a depth-first search finds that
           tries closing bytes first (quote, brackets, comma, colon, "0", letters, then the
           rest) and never revisits a state key: an upper bound on the shortest, found in a
           few dozen states where breadth-first search would expand every string one might
           write,
    r(x) = max_tokens - |x|, the tokens x has left before EOS is forced.

When no completion is found (the byte search past ``max_nodes`` states: in an object open to
any further key it writes ever new keys before the required one, which is why a JSONSchema
answers with its own), m(x) is unknown and the critic returns None: then the engine twists
no particle of that island at that step, since a particle left untwisted beside twisted ones
would look as if it had nothing left to write and win resampling (docs/quality.md). That
verdict is remembered per state key like a length, so a particle writing a long value in such
an object does not repeat the search at every step (benchmarks/RESULTS.md, "bench_critic.py":
how often each way finds a length on JSONSchemaBench's schemas).

The ``rate`` term is 0 for a particle that could stop now, small while the budget is ample, and
grows as the budget runs out for particles that still have much to write (inside a runaway
string, far from the last required key), so resampling keeps the ones that will finish.

The ``per_byte`` term prices what a particle has still to write whatever the budget. Its
reason is unequal progress (docs/quality.md, "Why runaways win resampling"): the weight of a
particle is the product of the local masses it has paid so far, and the structure the model is
reluctant to write (a required key it would name otherwise, the EOS after the closing brace)
costs every particle the same nats *when it gets there*. A particle behind in the document
(still writing its first string value, where every token is allowed) has not paid them yet,
so without the twist it outweighs the particles ahead of it and wins resampling. With the
twist psi ~ log E[future local masses | x] ~ -per_byte * m(x) the particles are compared on an
estimate of their final weight instead of their weight so far; ``per_byte`` is the mean cost
in nats of one byte of remaining structure (measured on the Ada task: docs/quality.md).

That estimate is off inside a literal a particle has begun (a closed object's key, an
enum/const value, true/false/null: ``committed(state)`` of the constraint, potentials.contract).
The model takes a literal's whole cost at its first token (a key it is reluctant to name costs
about 4 nats there on the Ada task) while the twist returns the literal's price byte by byte, so
a particle that has just begun a key looks several nats worse than one about to begin it, or
one past it, and resampling drops it by chance. With ``hold_literals`` the critic's ``holds``
says so, and the engine never drops such a particle when it resamples (smc.engine.loop: its
priority is raised to its island's mean, so it keeps one child with its own weight): it is
compared again once it has written the literal.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from typing import Any

from smc.core.logmath import NEG_INF
from potentials.lift import Lifted

#: states a breadth-first search expands before the depth-first one takes over
BREADTH_NODES = 16
#: states the depth-first search expands before it gives up. On the project's JSON tasks and
#: the Ada task every search that finds a length does within 66; on the JSONSchemaBench
#: selection 95% of those that find one do within 100, but 88% give up, each after max_nodes
#: states: at 8 particles 400 made the critic 13% of the wall time, 100 makes it 5%, with the
#: same output on every quality task (benchmarks/RESULTS.md, "bench_critic.py")
MAX_NODES = 100

#: bytes tried, in this order, when searching for a completion: what closes strings,
#: containers and values first, then letters (names), then the rest of printable ASCII and the
#: JSON/grammar whitespace, then UTF-8 continuation bytes. Without the last, a text that ends
#: inside a multi-byte character (a token that splits an emoji or a CJK character) had no
#: completion found, hence no twist, and won every resampling against the particles that were
#: twisted: one population of 64 collapsed onto such text (docs/quality.md). 0x80, 0x90, 0xA0
#: and 0xBF cover the second byte's range after every leading byte (E0: A0-BF, ED: 80-9F, F0:
#: 90-BF, F4: 80-8F).
COMPLETION_BYTES = tuple(
    dict.fromkeys(b'"}])' + b",:0" + bytes(range(0x61, 0x7B)) + bytes(range(0x20, 0x7F)) + b"\t\n\r"
                  + b"\x80\x90\xa0\xbf")
)


class BudgetCritic:
    """The critic psi(x) = -m(x) * (per_byte + rate / max(r(x), 1)) of the module docstring.

    Args:
        rate: nats of twist per byte still to write per token left (>= 0).
        per_byte: nats of twist per byte still to write (>= 0; 0, the default, leaves the
            budget term alone).
        max_nodes: states expanded per completion search; past it the search gives up and
            the particle is unrated (None), so a slow search costs a bounded time.
        cache_size: completion lengths remembered, keyed by the constraint's ``completion_key``
            (and as many keys whose search gave up).
        completions: where breadth-first search finds no length, take the length of the
            constraint's own completion (``potential.completion(state)``, where it knows one)
            before searching depth-first; False searches bytes only.
        hold_literals: protect a particle inside a literal it has begun from being dropped
            by resampling (``holds``; module docstring). Off by default; ``generate`` turns it
            on for runs of fewer than ``defaults.HOLD_LITERALS_BELOW`` particles.

    Works with ``smc.generate`` (particles of the built-in ConstrainedGeneration program) and a
    byte-level constraint; for other particles, or without a constraint, it returns 0 (no twist).
    """

    def __init__(self, rate: float = 1.0, max_nodes: int = MAX_NODES, cache_size: int = 4096,
                 per_byte: float = 0.0, completions: bool = True, hold_literals: bool = False):
        for name, value in (("rate", rate), ("per_byte", per_byte)):
            if isinstance(value, bool) or not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if not (isinstance(max_nodes, int) and max_nodes >= 1):
            raise ValueError(f"max_nodes must be an integer >= 1, got {max_nodes!r}")
        self.rate, self.max_nodes, self.cache_size = float(rate), max_nodes, cache_size
        if not isinstance(completions, bool):
            raise ValueError(f"completions must be True or False, got {completions!r}")
        self.per_byte, self.completions = float(per_byte), completions
        if not isinstance(hold_literals, bool):
            raise ValueError(f"hold_literals must be True or False, got {hold_literals!r}")
        self.hold_literals = hold_literals
        self._cache: OrderedDict[Any, int] = OrderedDict()
        self._gave_up: OrderedDict[Any, None] = OrderedDict()
        self.stats = {"searches": 0, "cache_hits": 0, "nodes": 0, "advances": 0, "completions": 0,
                      "gave_up": 0}

    async def completion_bytes(self, potential: Any, state: Any) -> int | None:
        """m: the length of the byte string w found by the search of the module docstring
        (or the constraint's own completion), with potential.state_complete(advance(state, w))
        > -inf. States are told apart by ``potential.completion_key``. If the search expands
        max_nodes states without finding one, None (remembered apart from the lengths, which
        the depth-first search reads as distances to the end)."""
        key = potential.completion_key(state)
        if key is not None and key in self._cache:
            self._cache.move_to_end(key)
            self.stats["cache_hits"] += 1
            return self._cache[key]
        if key is not None and key in self._gave_up:
            self._gave_up.move_to_end(key)
            self.stats["cache_hits"] += 1
            return None
        self.stats["searches"] += 1
        found = await self._breadth_first(potential, state, key)
        if found is None and self.completions:
            known = potential.completion(state)
            if known is not None:
                found = len(known)
                self.stats["completions"] += 1
        if found is not None:
            self._remember([key], found)
            return found
        found, keys = await self._depth_first(potential, state, key)
        if found is None:
            self.stats["gave_up"] += 1
            if key is not None:
                self._gave_up[key] = None
                if len(self._gave_up) > self.cache_size:
                    self._gave_up.popitem(last=False)
            return None
        self._remember(keys, found)
        return found

    async def _breadth_first(self, potential: Any, state: Any, key: Any) -> int | None:
        """The shortest completion, if one is among the first BREADTH_NODES states in
        breadth-first order. A state's children are made only while some of them can still be
        reached within that number: making them (one advance per byte tried) costs far more
        than testing the few that are reached."""
        queue, seen, nodes = deque([(state, 0)]), {key} - {None}, 0
        while queue:
            s, depth = queue.popleft()
            nodes += 1
            if await potential.state_complete(s) > NEG_INF:
                self.stats["nodes"] += nodes
                return depth
            allowed = potential.next_bytes(s)
            for b in COMPLETION_BYTES:
                if nodes + len(queue) >= BREADTH_NODES:
                    break
                child = self._unseen_child(potential, s, b, seen, allowed)
                if child is not None:
                    queue.append((child[0], depth + 1))
        self.stats["nodes"] += nodes
        return None

    async def _depth_first(self, potential: Any, state: Any, key: Any) -> tuple[int | None, list]:
        """A completion by depth-first search in COMPLETION_BYTES order that never revisits a
        key, stopping early at a key whose length is remembered: (its length, the keys on its
        path), or (None, []) past max_nodes expansions."""
        path, seen, nodes = [(state, key, 0)], {key} - {None}, 0
        found = None
        while path:
            s, k, i = path[-1]
            if i == 0:
                nodes += 1
                if k is not None and k in self._cache:
                    found = len(path) - 1 + self._cache[k]
                    break
                if await potential.state_complete(s) > NEG_INF:
                    found = len(path) - 1
                    break
                if nodes >= self.max_nodes:
                    break
            child, allowed = None, potential.next_bytes(s)
            while i < len(COMPLETION_BYTES) and child is None:
                child = self._unseen_child(potential, s, COMPLETION_BYTES[i], seen, allowed)
                i += 1
            if child is None:
                path.pop()
            else:
                path[-1] = (s, k, i)
                path.append((*child, 0))
        self.stats["nodes"] += nodes
        return found, ([k for _, k, _ in path] if found is not None else [])

    def _remember(self, keys: list, found: int) -> None:
        """Store m for each key of a path whose first key needs ``found`` bytes."""
        for depth, k in enumerate(keys):
            if k is not None:
                self._cache[k] = found - depth
                self._cache.move_to_end(k)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def _unseen_child(self, potential: Any, state: Any, byte: int, seen: set,
                      allowed: Any) -> tuple[Any, Any] | None:
        """(advance(state, byte), its completion key), or None when that state is dead or its
        key is already in ``seen`` (a new key is added to ``seen``). A byte outside
        ``allowed``, the constraint's ``next_bytes(state)`` (a superset of the live bytes; None:
        any), is dead without an advance: the same children with fewer advances, counted in
        ``stats["advances"]``."""
        if allowed is not None and byte not in allowed:
            return None
        self.stats["advances"] += 1
        t = potential.advance(state, bytes((byte,)))
        if t is None:
            return None
        k = potential.completion_key(t)
        if k is not None:
            if k in seen:
                return None
            seen.add(k)
        return t, k

    def holds(self, particle: Any) -> bool:
        """Is ``particle`` unfinished and inside a literal it has begun (its constraint's
        ``committed(state)`` not empty), with ``hold_literals`` on? Then a resampling at this
        step does not drop it (smc.engine.loop)."""
        potential = getattr(getattr(particle, "sampler", None), "potential", None)
        if not self.hold_literals or not isinstance(potential, Lifted) or particle.finished:
            return False
        state = potential.state(tuple(particle.token_ids()))
        return state is not None and bool(potential.potential.committed(state))

    async def __call__(self, particle: Any) -> float | None:
        sampler = getattr(particle, "sampler", None)
        potential = getattr(sampler, "potential", None)
        if not isinstance(potential, Lifted) or (self.rate == 0.0 and self.per_byte == 0.0):
            return 0.0
        tokens = tuple(particle.token_ids())
        state = potential.state(tokens)
        if state is None:
            return 0.0
        left = max(int(particle.max_tokens) - len(tokens), 1)
        m = await self.completion_bytes(potential.potential, state)
        return None if m is None else -m * (self.per_byte + self.rate / left)
