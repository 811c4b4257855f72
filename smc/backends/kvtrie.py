"""A prefix trie over token ids that owns cached key/value states and next-token log-probs.

Each trie node below the root is one token at one position. Its key/value state (all layers)
lives in one row ("slot") of a shared pool tensor, so the state of any cached context is
``pool[node.path]``, where ``node.path`` lists the slots from the first token to the node: one
gather assembles a batch's past, whatever the contexts share. Nodes where a request ended also
keep that request's log-probs.

Memory is bounded: ``bytes = slot_bytes * live slots + row_bytes * stored rows`` stays under a
budget by evicting least-recently-used entries (a log-prob row anywhere; a slot only at a leaf,
since descendants need their ancestors' state). Evicting only forgets: a later request for an
evicted context recomputes it, with the same result.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Sequence

import numpy as np
import torch


class Node:
    __slots__ = ("token", "parent", "children", "depth", "slot", "path", "logprobs", "last_used")

    def __init__(self, token: int, parent: "Node | None", slot: int, path: np.ndarray):
        self.token = token
        self.parent = parent
        self.children: dict[int, Node] = {}
        self.depth = 0 if parent is None else parent.depth + 1
        self.slot = slot
        self.path = path
        self.logprobs: torch.Tensor | None = None
        self.last_used = 0


class KVTrie:
    """Prefix trie of cached states with a byte budget.

    Args:
        slot_numel: elements of one position's key/value state, all layers together.
        dtype, device: of the state pool.
        row_bytes: bytes of one stored log-prob row.
        budget_bytes: bound on ``slot_bytes * slots + row_bytes * rows``.
    """

    def __init__(
        self,
        slot_numel: int,
        dtype: torch.dtype,
        device: torch.device | str,
        row_bytes: int,
        budget_bytes: int,
    ):
        if budget_bytes < 0:
            raise ValueError(f"cache budget must be non-negative, got {budget_bytes}")
        self.slot_numel = slot_numel
        self.slot_bytes = slot_numel * torch.tensor([], dtype=dtype).element_size()
        self.row_bytes = row_bytes
        self.budget_bytes = budget_bytes
        # Slot 0 stays zero: padded positions of a batch read it.
        self.pool = torch.zeros((64, slot_numel), dtype=dtype, device=device)
        self._free: list[int] = list(range(63, 0, -1))
        self.root = Node(-1, None, 0, np.zeros(0, dtype=np.int64))
        self._nodes = 0
        self._rows: dict[tuple[int, ...], Node] = {}
        self._clock = itertools.count(1)
        self.evictions = 0

    # ----------------------------------------------------------------- lookup
    @property
    def used_bytes(self) -> int:
        return self._nodes * self.slot_bytes + len(self._rows) * self.row_bytes

    def cached_logprobs(self, ids: tuple[int, ...]) -> torch.Tensor | None:
        """The stored log-probs after ``ids``, if any (marks them recently used)."""
        node = self._rows.get(ids)
        if node is None:
            return None
        node.last_used = next(self._clock)
        return node.logprobs

    def longest_prefix(self, ids: Sequence[int], limit: int) -> Node:
        """Deepest node on the path of ``ids[:limit]``."""
        node = self.root
        parent = self._rows.get(tuple(ids[: limit]))
        if parent is not None:
            return parent
        for t in ids[:limit]:
            child = node.children.get(t)
            if child is None:
                break
            node = child
        return node

    # ----------------------------------------------------------------- insert
    def allocate(self, n: int) -> np.ndarray:
        """``n`` free slots (the pool grows when needed)."""
        if n > len(self._free):
            old = self.pool.shape[0]
            new = max(2 * old, old + n - len(self._free))
            grown = torch.zeros((new, self.slot_numel), dtype=self.pool.dtype, device=self.pool.device)
            grown[:old] = self.pool
            self.pool = grown
            self._free.extend(range(new - 1, old - 1, -1))
        out = [self._free.pop() for _ in range(n)]
        return np.asarray(out, dtype=np.int64)

    def extend(self, parent: Node, tokens: Sequence[int], slots: np.ndarray) -> tuple[Node, int]:
        """Add the chain ``tokens`` below ``parent``, whose states are in ``slots``.

        Returns the last node and how many of the positions were already in the trie (their
        new slots are released: the old state is kept, as other paths point to it).
        """
        node = parent
        path = np.concatenate([parent.path, slots])
        duplicates = 0
        now = next(self._clock)
        for k, (t, s) in enumerate(zip(tokens, slots.tolist())):
            child = node.children.get(t)
            if child is None:
                child = Node(t, node, s, path[: parent.depth + k + 1])
                node.children[t] = child
                self._nodes += 1
            else:
                duplicates += 1
                self._free.append(s)
                if child.slot != s:
                    # Later nodes of this chain must point at the slot that stays.
                    path[parent.depth + k] = child.slot
            child.last_used = now
            node = child
        return node, duplicates

    def store_logprobs(self, ids: tuple[int, ...], node: Node, logprobs: torch.Tensor) -> None:
        node.logprobs = logprobs
        node.last_used = next(self._clock)
        self._rows[ids] = node

    # ----------------------------------------------------------------- evict
    def evict(self, target_bytes: int | None = None) -> None:
        """Forget least-recently-used entries until ``used_bytes <= target_bytes``."""
        target = self.budget_bytes if target_bytes is None else target_bytes
        if self.used_bytes <= target:
            return
        heap = [(n.last_used, id(n), n) for n in self._iter_nodes() if n.logprobs is not None or not n.children]
        heapq.heapify(heap)
        while heap and self.used_bytes > target:
            _, _, node = heapq.heappop(heap)
            if node.parent is None and node is not self.root:
                continue  # already removed
            if node.logprobs is not None:
                ids = self._ids_of(node)
                del self._rows[ids]
                node.logprobs = None
                self.evictions += 1
            if not node.children and node is not self.root:
                parent = node.parent
                del parent.children[node.token]
                node.parent = None
                self._free.append(node.slot)
                self._nodes -= 1
                self.evictions += 1
                if parent is not self.root and not parent.children and parent.logprobs is None:
                    heapq.heappush(heap, (parent.last_used, id(parent), parent))

    def _iter_nodes(self):
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    @staticmethod
    def _ids_of(node: Node) -> tuple[int, ...]:
        out = []
        while node.parent is not None:
            out.append(node.token)
            node = node.parent
        return tuple(reversed(out))

    def clear(self) -> None:
        """Forget everything."""
        self.evict(target_bytes=-1)
