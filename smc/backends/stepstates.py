"""Key/value states of a forward pass's rows, laid out for attention and kept for the next pass.

A batch of B rows, row b with a cached past of c_b positions and n_b new tokens, is run over

    states[layer, k|v, b, head, E - P + j, :]    j = 0 .. P + N - 1,   P = max c_b, N = max n_b

with row b's past right-aligned at column E (columns E - c_b .. E - 1) and its new positions
written at E .. E + N - 1 by the forward pass itself: the layout of ``HFLM``'s batch (its module
docstring), in the [batch, heads, positions, dim] order that attention reads without a copy.

A population step asks for contexts that extend the last step's by one token each, and its past
is the last step's full context. Reading every row's past from the prefix trie again would copy
B x (P + N) positions of every layer at every step; ``StepStates`` keeps the last pass's buffer
instead, so that a row whose past *is* one of the last pass's contexts reads it in place. Rows
are placed so that each such context's first continuation keeps the buffer row it had (after
resampling, only the extra copies of a duplicated particle move: one copy per moved row); the
other rows' pasts are read from the trie's pool, as for a buffer used once.

Columns to the left of a row's past hold zeros or stale states of earlier rows: always finite,
and masked out by the batch's attention mask, so they never reach a result.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from smc.backends.kvtrie import Node

#: a kept buffer of P + N columns gets (P + N) // SLACK_SHARE + SLACK_MIN free ones: it is
#: reallocated (one copy of every row's states) once per that many single-token steps, so the
#: copy costs at most ~SLACK_SHARE positions per row and step, for at most 1 / SLACK_SHARE more
#: memory (plus SLACK_MIN columns). A fixed count does not fit both ends: 64 columns made a
#: 40-token population's buffer 2.6x what it needed, and a 4,000-token one reallocate every
#: 64 steps
SLACK_SHARE = 8
SLACK_MIN = 16


class StepStates:
    """The states buffer of one source's passes (see the module docstring).

    Args:
        kv_shape: (layers, 2, heads, head_dim) of one position's state.
        dtype, device: of the buffer (those of the model's states).
        stats: the backend's counters; ``kv_read_positions`` counts positions read from a
            trie's pool, ``kv_moved_positions`` those copied between buffer rows.
        keep: keep the buffer and its contexts for the next pass of the same path (a
            source's population steps, or its batcher's single requests); False for a buffer
            used once (a batch mixing sources).
    """

    def __init__(self, kv_shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
                 stats: dict[str, int], *, keep: bool):
        self.kv_shape = kv_shape
        self.dtype, self.device = dtype, device
        self.stats = stats
        self.keep = keep
        self._buf: torch.Tensor | None = None  # [layers, 2, rows, heads, columns, dim]
        self._end = 0  # E: the column after the last pass's last position
        # a context of the last pass, by ``_key``, -> its buffer row; and that pass's N
        self._rows: dict[tuple[Node, tuple[int, ...]], int] = {}
        self._new = 0

    def clear(self) -> None:
        """Give the buffer's memory back; the next pass reads every past from the trie."""
        self._buf, self._end, self._rows = None, 0, {}

    def place(
        self, pasts: Sequence[Node], new: Sequence[int], pools: Sequence[torch.Tensor],
    ) -> tuple[list[int], torch.Tensor]:
        """Lay out a pass: ``order`` (the rows in buffer order: batch row b is input row
        ``order[b]``) and the view [layers, 2, B, heads, P + N, dim] of their states, each past
        right-aligned at column P of the view.

        Args:
            pasts: each row's cached past, the trie node of its context's first c_b tokens.
            new: n_b, each row's count of new tokens.
            pools: each row's trie pool, one slot per row of [slots, prod(kv_shape)].
        """
        B, P, N = len(pasts), max(p.depth for p in pasts), max(new)
        parent = [self._rows.get(self._key(p), -1) if self._rows else -1 for p in pasts]
        # Forgotten until ``commit``: a pass that fails after rows moved leaves no stale index.
        self._rows = {}
        if all(q < 0 for q in parent) or P > self._end:
            parent = [-1] * B  # nothing to keep: lay the pass out afresh, every row read
            self._allocate(B, P, N)
        else:
            self._make_room(B, P, N)
        order, moves = placement(parent, B)
        E, buf = self._end, self._buf
        if moves:
            src = torch.tensor([s for s, _ in moves], device=self.device)
            dst = torch.tensor([d for _, d in moves], device=self.device)
            buf[:, :, dst, :, E - P : E] = buf[:, :, src, :, E - P : E]
            self.stats["kv_moved_positions"] += len(moves) * P
        fresh = [b for b, r in enumerate(order) if parent[r] < 0]
        for pool in {id(pools[order[b]]): pools[order[b]] for b in fresh}.values():
            members = [b for b in fresh if pools[order[b]] is pool]
            self._read(members, [pasts[order[b]].path for b in members], pool, P)
        return order, buf[:, :, :B, :, E - P : E + N]

    def commit(self, pasts: Sequence[Node], new: Sequence[Sequence[int]]) -> None:
        """After the pass laid out by ``place``: the context of batch row b, ``pasts[b]``'s
        tokens then ``new[b]``, is now whole in the buffer where every row had N = max n_b new
        tokens (a row with fewer has padding inside it and is not kept)."""
        N = max(len(n) for n in new)
        self._end += N
        if not self.keep:
            self.clear()
            return
        self._new = N
        self._rows = {(past, tuple(n)): b for b, (past, n) in enumerate(zip(pasts, new)) if len(n) == N}

    def _key(self, past: Node) -> tuple[Node, tuple[int, ...]] | None:
        """The key under which ``commit`` kept the context that ends at ``past``: its ancestor
        N levels up and the N tokens from there (N: the last pass's new-token count). A node
        names its token path for as long as it lives, so equal keys are equal contexts; a path
        evicted and cached again has new nodes, and is read from the trie."""
        if past.depth < self._new:
            return None
        tokens = []
        for _ in range(self._new):
            tokens.append(past.token)
            past = past.parent
        return past, tuple(reversed(tokens))

    def _slack(self, P: int, N: int) -> int:
        return (P + N) // SLACK_SHARE + SLACK_MIN if self.keep else 0

    def _new_buffer(self, rows: int, P: int, N: int) -> torch.Tensor:
        """rows x (P + N + slack) columns: columns P and on zeroed here; columns 0 .. P - 1 of
        a row are written (read from a pool, with its zero slot before a shorter past, copied
        or moved) before a pass reads them, so no column holds anything but zeros or states
        (masked columns must be finite: 0 x NaN is NaN)."""
        L, two, H, D = self.kv_shape
        buf = torch.empty((L, two, rows, H, P + N + self._slack(P, N), D), dtype=self.dtype, device=self.device)
        buf[:, :, :, :, P:] = 0
        return buf

    def _allocate(self, B: int, P: int, N: int) -> None:
        """A new buffer of B rows; ``place`` reads every row's past."""
        self._buf, self._end, self._rows = self._new_buffer(B, P, N), P, {}

    def _make_room(self, B: int, P: int, N: int) -> None:
        buf, E = self._buf, self._end
        if B <= buf.shape[2] and E + N <= buf.shape[4]:
            return
        rows = buf.shape[2]
        # rows grow by half at least: a population's distinct contexts grow a few at a time
        # as its particles diverge, and each growth copies every row
        rows_now = max(B, rows + rows // 2) if B > rows else rows
        grown = self._new_buffer(rows_now, P, N)
        grown[:, :, :rows, :, :P] = buf[:, :, :, :, E - P : E]
        self._buf, self._end = grown, P

    def _read(self, rows: list[int], paths: Sequence[np.ndarray], pool: torch.Tensor, P: int) -> None:
        """Rows ``rows`` of the buffer get their pasts from ``pool``, right-aligned at E, and
        zeros in the P - c_b columns before."""
        slots = np.zeros((len(rows), P), dtype=np.int64)  # slot 0 is the pool's zero row
        for k, path in enumerate(paths):
            slots[k, P - len(path) :] = path
        flat = torch.from_numpy(slots.reshape(-1)).to(pool.device)
        states = pool.index_select(0, flat).view(len(rows), P, *self.kv_shape)
        E = self._end
        index = torch.tensor(rows, device=self.device)
        self._buf[:, :, index, :, E - P : E] = states.permute(2, 3, 0, 4, 1, 5).to(self.dtype)
        self.stats["kv_read_positions"] += int(sum(len(p) for p in paths))


def placement(parent: list[int], B: int) -> tuple[list[int], list[tuple[int, int]]]:
    """Buffer rows 0..B-1 for B input rows whose states continue buffer rows ``parent`` (-1:
    none): ``order[b]`` is the input row placed at buffer row b, and ``moves`` the (source,
    destination) buffer rows to copy. The first input row continuing buffer row q < B stays at
    q; the others fill the rows left free. No destination is a source, so all moves can be done
    at once."""
    at: list[int | None] = [None] * B
    rest = []
    for r, q in enumerate(parent):
        if 0 <= q < B and at[q] is None:
            at[q] = r
        else:
            rest.append(r)
    free = iter(b for b in range(B) if at[b] is None)
    moves = []
    for r in rest:
        b = next(free)
        at[b] = r
        if parent[r] >= 0:
            moves.append((parent[r], b))
    return at, moves  # type: ignore[return-value]
