"""Auto-batching: concurrent requests from many coroutines become one call on a list.

Every ``await batcher.submit(x)`` puts x in a queue. A worker task waits while the queue is still
growing, then hands up to ``max_batch`` queued items to ``process`` in one call (a plain function,
as for an LM's forward pass, or a coroutine function, as for a sampler's population step). It waits by
yielding to the event loop (``asyncio.sleep(0)``), never on a timer: when every coroutine that
will ask has asked, the batch starts on the next loop turn, so batching adds no latency.
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from typing import Any, Awaitable, Callable, Generic, Sequence, TypeVar, Union

from smc.backends.base import BackendView, LMBackend, NextTokenDists, next_token_dists

T = TypeVar("T")
R = TypeVar("R")


class AutoBatcher(Generic[T, R]):
    """Gathers concurrent ``submit`` calls into calls of ``process(items) -> results``.

    Args:
        process: computes one result per item (same order), returned directly or awaited. If
            it raises, every request of that batch gets the exception and later batches run
            as usual.
        max_batch: most items per call.
        settle_turns: loop turns without a new request before a partial batch runs; more turns
            let deeper call chains (coroutines that await other coroutines before asking)
            join the batch.
    """

    def __init__(
        self,
        process: Callable[[list[T]], Union[Sequence[R], Awaitable[Sequence[R]]]],
        max_batch: int,
        settle_turns: int = 2,
    ):
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self._process = process
        self.max_batch = max_batch
        self.settle_turns = settle_turns
        self._queue: list[tuple[T, asyncio.Future]] = []
        self._worker: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def submit(self, item: T) -> R:
        """The result of ``item``, computed in a batch with whatever else is asked meanwhile."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # A backend outlives event loops (e.g. one per test); state of a finished loop is void.
            self._loop, self._queue, self._worker = loop, [], None
        fut = loop.create_future()
        self._queue.append((item, fut))
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._run())
        return await fut

    async def _run(self) -> None:
        while self._queue:
            quiet = 0
            while quiet < self.settle_turns and len(self._queue) < self.max_batch:
                size = len(self._queue)
                await asyncio.sleep(0)
                quiet = quiet + 1 if len(self._queue) == size else 0
            batch = self._queue[: self.max_batch]
            del self._queue[: self.max_batch]
            live = [(item, fut) for item, fut in batch if not fut.done()]
            if not live:
                continue
            try:
                results = self._process([item for item, _ in live])
                if inspect.isawaitable(results):
                    results = await results
            except Exception as e:  # noqa: BLE001 - the callers receive it
                for _, fut in live:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            for (_, fut), result in zip(live, results):
                if not fut.done():
                    fut.set_result(result)


class GatheredLM(BackendView):
    """A view of ``lm`` whose population calls from concurrent tasks share forward passes.

    ``await view.batch_next_token_dists(batch)`` from several tasks of one event loop (e.g.
    several requests of the batch runner, each stepping its own population) are gathered by an
    AutoBatcher: the contexts of up to ``max_calls`` such calls, asked in the same loop turns,
    go to ``lm`` in one call (whose backend runs them as one forward pass, up to its own
    ``max_batch`` rows), and each caller gets its own rows back, in its order. A row is
    p(· | ctx) whatever else is in the batch, up to the float rounding of batched forwards.

    Every other member is ``lm``'s own (vocabulary, ``encode``, ``stats``, ...). Made by the
    layer above for the lifetime of a batch; like a backend it is shared by particles.
    """

    def __init__(self, lm: LMBackend, max_calls: int = 64, *, weak: bool = False):
        super().__init__(lm, weak=weak)
        self._gather: AutoBatcher[list[tuple[int, ...]], Any] = AutoBatcher(self._run, max_calls)

    async def next_token_logprobs(self, ids: Sequence[int]) -> Any:
        return await self.inner.next_token_logprobs(ids)

    async def batch_next_token_logprobs(self, batch: Sequence[Sequence[int]]) -> Any:
        return (await self.batch_next_token_dists(batch)).logp

    async def batch_next_token_dists(self, batch: Sequence[Sequence[int]]) -> Any:
        """The NextTokenDists of ``batch``, computed with the calls of other tasks."""
        got = await self._gather.submit([tuple(ids) for ids in batch])
        if isinstance(got, BaseException):
            raise got
        return got

    async def _run(self, calls: list[list[tuple[int, ...]]]) -> list[Any]:
        """One call on ``lm`` for the contexts of every gathered call, split back. If it fails,
        each call runs alone, so that a failure reaches only the task whose contexts caused it
        (one request's failure never fails the requests that stepped beside it)."""
        flat = [ids for call in calls for ids in call]
        try:
            dists = await next_token_dists(self.inner, flat)
        except Exception:  # noqa: BLE001 - retried call by call below
            if len(calls) == 1:
                raise
            out: list[Any] = []
            for call in calls:
                try:
                    out.append(await next_token_dists(self.inner, call))
                except Exception as e:  # noqa: BLE001 - raised in its own caller
                    out.append(e)
            return out
        out, start = [], 0
        for call in calls:
            end = start + len(call)
            out.append(NextTokenDists(dists.logp[start:end], dists.cdf[start:end]))
            start = end
        return out


_GATHERED: "weakref.WeakKeyDictionary[Any, dict[int, GatheredLM]]" = weakref.WeakKeyDictionary()


def gathered(lm: LMBackend, max_calls: int = 64) -> GatheredLM:
    """The ``GatheredLM`` view of ``lm`` (one per backend and ``max_calls``, reused), so that
    what is cached per LM object (vocabulary tables, masks) is built once for every batch run
    on that backend, not once per run."""
    try:
        views = _GATHERED.setdefault(lm, {})
    except TypeError:  # a backend that cannot be weakly referenced: a new view each time
        return GatheredLM(lm, max_calls)
    view = views.get(max_calls)
    if view is None:
        view = views[max_calls] = GatheredLM(lm, max_calls, weak=True)
    return view
