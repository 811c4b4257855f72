"""Run counters: what a run reports of the work its backends, samplers and potentials did.

Every counted object keeps named numbers in a dict ``stats`` (a backend's ``requests``,
``forward_passes``, ...; a sampler's ``steps``, ``checks``, ...). A run reports, per object,

    delta(obj) = obj.stats at the end of the run - obj.stats when obj registered with the run,

for exactly the objects that registered: each one calls ``register(self, ...)`` when it is asked
to work (a sampler when it samples, naming its LM and potential too; a backend when it gets a
request). Nothing walks the particles' object graphs, and an object created during the run counts
from zero.

The current run is a context variable, so the asyncio tasks a run creates (particle steps,
batchers) register with it, and two runs in one event loop keep separate accounts. An object
shared by two concurrent runs (one LM) counts both runs' work in its own ``stats``, and each run's
delta then includes the other's requests made while it was going on.

Objects that share one ``stats`` dict (an adapter view and its base model, a proposal and its
inner sampler) are counted once, under the first of them to register.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator

_CURRENT: ContextVar["RunCounters | None"] = ContextVar("smc_run_counters", default=None)


def _numbers(stats: dict) -> dict[str, float]:
    return {k: v for k, v in stats.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class RunCounters:
    """The registered objects of one run and their counters at registration."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[Any, dict, dict[str, float]]] = {}  # id(stats) -> entry

    def add(self, obj: Any) -> None:
        stats = getattr(obj, "stats", None)
        if isinstance(stats, dict) and id(stats) not in self._seen:
            self._seen[id(stats)] = (obj, stats, _numbers(stats))

    def deltas(self) -> list[tuple[Any, dict[str, float]]]:
        """(object, counters now minus at registration) for every registered object, in the
        order they registered."""
        out = []
        for obj, stats, before in self._seen.values():
            now = _numbers(stats)
            out.append((obj, {k: v - before.get(k, 0) for k, v in now.items()}))
        return out

    @contextmanager
    def active(self) -> Iterator["RunCounters"]:
        """Make this the current run of the calling task (and of the tasks it creates)."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)


def current() -> RunCounters | None:
    """The run the calling task works for (None outside runs)."""
    return _CURRENT.get()


def register(*objs: Any) -> None:
    """Count ``objs`` (those with a ``stats`` dict; None is skipped) in the current run, if any."""
    run = _CURRENT.get()
    if run is not None:
        for obj in objs:
            if obj is not None:
                run.add(obj)
