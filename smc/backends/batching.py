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
from typing import Awaitable, Callable, Generic, Sequence, TypeVar, Union

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
