"""Awaiting many coroutines as one: all succeed, or the first failure cancels the rest."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Iterable


async def run_all(coros: Iterable[Awaitable[Any]]) -> list[Any]:
    """Await all concurrently; on the first error (or cancellation) cancel the rest, then re-raise."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
