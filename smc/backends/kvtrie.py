"""A prefix trie over token ids that owns cached key/value states and next-token log-probs.

Each trie node below the root is one token at one position. Its key/value state (all layers)
lives in one row ("slot") of a shared pool tensor, so the state of any cached context is
``pool[node.path]``, where ``node.path`` lists the slots from the first token to the node: one
gather assembles a batch's past, whatever the contexts share. Nodes where a request ended also
keep that request's log-probs.

Memory is bounded by a byte budget B that counts everything the cache allocates:

    used_bytes = C * slot_cost + sum over nodes of node_cost + sum over rows of row_cost <= B

where C + 1 is the pool's allocated length (slot 0, a constant zero row that padded positions
of a batch read, is the one fixed cost outside the budget), slot_cost = bytes of one position's
state plus its free-list entry, node_cost = the node object plus the token path it owns, and
row_cost = a stored log-prob row plus its key. Free slots count: the pool is allocated memory.
The pool grows (doubling) only while the total stays within B; past that, least-recently-used
entries are evicted (a log-prob row anywhere; a slot only at a leaf, since descendants need
their ancestors' state) to make room, and a batch that cannot fit even then is simply not
cached. ``clear`` frees everything and shrinks the pool back to its initial length. Evicting
only forgets: a later request for an evicted context recomputes it, with the same result.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

#: bytes charged per node (object, children dict, path view) and per stored row (tensor
#: object, dict entry, key tuple header); generous upper bounds of CPython's sizes
NODE_OVERHEAD = 512
ROW_OVERHEAD = 320
#: per pool slot: its entry in the free list (pointer plus int object)
SLOT_OVERHEAD = 40
_INITIAL_SLOTS = 64

#: a cache's byte budget where the backend has no better measure of its device's memory (CPU,
#: Apple's unified memory): on the embedded model (46 KB per position) 23,000 positions, room for
#: a population of 64 particles at 256 tokens (16,400); 1,000 runs on it keep RSS flat
#: (benchmarks/RESULTS.md, "bench_soak.py")
CACHE_BUDGET_BYTES = 1 << 30


class Node:
    __slots__ = ("token", "parent", "children", "depth", "slot", "path", "logprobs", "last_used", "cost")

    def __init__(self, token: int, parent: "Node | None", slot: int, path: np.ndarray, cost: int = 0):
        self.token = token
        self.parent = parent
        self.children: dict[int, Node] = {}
        self.depth = 0 if parent is None else parent.depth + 1
        self.slot = slot
        self.path = path
        self.logprobs: torch.Tensor | None = None
        self.last_used = 0
        self.cost = cost  # bytes charged to this node (not counting its slot or row)


class KVTrie:
    """Prefix trie of cached states with a byte budget (see the module docstring).

    Args:
        slot_numel: elements of one position's key/value state, all layers together (0 when
            states are not cached: nodes then only carry log-prob rows).
        dtype, device: of the state pool.
        row_bytes: bytes of one stored log-prob row.
        budget_bytes: bound B on ``used_bytes``, a non-negative integer.
    """

    def __init__(
        self,
        slot_numel: int,
        dtype: torch.dtype,
        device: torch.device | str,
        row_bytes: int,
        budget_bytes: int,
    ):
        if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, (int, np.integer)):
            raise TypeError(f"cache budget must be an integer number of bytes, got {budget_bytes!r}")
        if budget_bytes < 0:
            raise ValueError(f"cache budget must be non-negative, got {budget_bytes}")
        self.slot_numel = slot_numel
        self.slot_bytes = slot_numel * torch.tensor([], dtype=dtype).element_size()
        self.slot_cost = self.slot_bytes + SLOT_OVERHEAD
        self.row_bytes = row_bytes
        self.budget_bytes = int(budget_bytes)
        self._dtype, self._device = dtype, device
        self.root = Node(-1, None, 0, np.zeros(0, dtype=np.int64))
        self.evictions = 0
        self._reset()

    def _reset(self) -> None:
        self.root.children = {}
        self.root.logprobs = None
        slots = max(0, min(_INITIAL_SLOTS, self.budget_bytes // (4 * self.slot_cost)))
        # Slot 0 stays zero: padded positions of a batch read it.
        self.pool = torch.zeros((slots + 1, self.slot_numel), dtype=self._dtype, device=self._device)
        self._free: list[int] = list(range(slots, 0, -1))
        self._nodes = 0
        self._node_bytes = 0
        self._row_bytes = 0
        self._rows: dict[tuple[int, ...], Node] = {}
        self._clock = itertools.count(1)

    # ----------------------------------------------------------------- lookup
    @property
    def used_bytes(self) -> int:
        """Bytes the cache holds: pool slots (free ones too), nodes and rows; <= budget_bytes."""
        return (self.pool.shape[0] - 1) * self.slot_cost + self._node_bytes + self._row_bytes

    @property
    def live_slots(self) -> int:
        return self._nodes

    def row_cost(self, ids: Sequence[int]) -> int:
        """Bytes charged for storing the log-prob row of ``ids``."""
        return self.row_bytes + ROW_OVERHEAD + 8 * len(ids)

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
    def insert(
        self,
        entries: Sequence[tuple[tuple[int, ...], Node, Sequence[int], torch.Tensor | None]],
        states: torch.Tensor | None,
    ) -> int:
        """Cache a batch: for each ``(ids, past, new, logprobs)``, the chain ``new`` below
        ``past`` (so ``ids = path(past) + new``) and the row ``logprobs`` at its end (no row
        when ``logprobs`` is None).

        ``states`` holds the new positions' key/value states, entries' ``new`` concatenated
        (one row of ``slot_numel`` each; None when ``slot_numel == 0``). When the whole batch
        does not fit in the budget, its entries are cached one by one while they fit (an entry
        that cannot fit even after evicting everything else is not cached). Returns how many
        positions were already in the trie (computed twice).
        """
        keep = {id(past) for _, past, _, _ in entries}
        offsets = np.cumsum([0] + [len(new) for _, _, new, _ in entries])
        try:
            whole = self._insert(entries, states, 0, len(entries), offsets, keep)
            if whole is not None:
                return whole
            parts = (self._insert(entries, states, k, k + 1, offsets, keep) for k in range(len(entries)))
            return sum(d for d in parts if d is not None)
        except BaseException:
            # A half-inserted batch (e.g. interrupted) may leave slots unaccounted: forgetting
            # everything is always correct.
            self.clear()
            raise

    def _insert(
        self, entries, states, lo: int, hi: int, offsets: np.ndarray, keep: set[int]
    ) -> int | None:
        """Insert ``entries[lo:hi]`` if they fit: their duplicate positions, or None (not cached)."""
        part = entries[lo:hi]
        n = int(offsets[hi] - offsets[lo])
        extra = sum(
            (0 if row is None else self.row_cost(ids)) + len(new) * NODE_OVERHEAD + 8 * len(ids)
            for ids, _, new, row in part
        )
        slots = self._allocate(n, extra, keep)
        if slots is None:
            return None
        if n and self.slot_numel:
            index = torch.from_numpy(slots).to(self.pool.device)
            block = states[int(offsets[lo]) : int(offsets[hi])]
            self.pool[index] = block.reshape(n, -1).to(self.pool.dtype)
        duplicates, offset = 0, 0
        for ids, past, new, logprobs in part:
            node, dup = self.extend(past, new, slots[offset : offset + len(new)])
            offset += len(new)
            duplicates += dup
            if logprobs is not None:
                # A copy with its own storage: a cached row must not keep its whole batch alive.
                self.store_logprobs(tuple(ids), node, logprobs.clone())
        return duplicates

    def _allocate(self, n: int, extra_bytes: int, keep: set[int]) -> np.ndarray | None:
        """``n`` free slots such that ``used_bytes + extra_bytes <= budget`` stays true once
        they are filled (growing the pool or evicting LRU entries, sparing nodes in ``keep``);
        None when impossible."""
        budget = self.budget_bytes
        fixed = lambda: self._node_bytes + self._row_bytes + extra_bytes  # noqa: E731
        capacity = lambda: self.pool.shape[0] - 1  # noqa: E731

        def fits() -> bool:
            if len(self._free) >= n:
                return capacity() * self.slot_cost + fixed() <= budget
            return (capacity() + n - len(self._free)) * self.slot_cost + fixed() <= budget

        if not fits():
            self._evict_until(fits, keep)
            if not fits() and (self._nodes + n) * self.slot_cost + fixed() <= budget:
                # Free slots crowd out rows (the pool grew while rows were few); what is left
                # after the evictions is small, so moving it is cheap.
                self._compact()
            if not fits():
                return None
        if len(self._free) < n:
            room = (budget - fixed()) // self.slot_cost
            old = capacity()
            new = min(room, max(2 * old, old + n - len(self._free)))
            grown = torch.zeros((new + 1, self.slot_numel), dtype=self.pool.dtype, device=self.pool.device)
            grown[: old + 1] = self.pool
            self.pool = grown
            self._free.extend(range(new, old, -1))
        out = [self._free.pop() for _ in range(n)]
        return np.asarray(out, dtype=np.int64)

    def _compact(self) -> None:
        """Move the live slots to 1..L and shrink the pool to exactly them."""
        nodes = list(self._iter_nodes())
        old = torch.tensor([nd.slot for nd in nodes], dtype=torch.int64)
        remap = np.zeros(self.pool.shape[0], dtype=np.int64)
        remap[old.numpy()] = np.arange(1, len(nodes) + 1)
        pool = torch.zeros((len(nodes) + 1, self.slot_numel), dtype=self.pool.dtype, device=self.pool.device)
        pool[1:] = self.pool[old.to(self.pool.device)]
        # Paths are views of shared arrays; rewriting each array once rewrites every view.
        bases = {}
        for nd in nodes:
            base = nd.path if nd.path.base is None else nd.path.base
            bases[id(base)] = base
        for base in bases.values():
            base[:] = remap[base]
        for k, nd in enumerate(nodes, start=1):
            nd.slot = k
        self.pool = pool
        self._free = []

    def extend(self, parent: Node, tokens: Sequence[int], slots: np.ndarray) -> tuple[Node, int]:
        """Add the chain ``tokens`` below ``parent``, whose states are in ``slots``.

        Returns the last node and how many of the positions were already in the trie (their
        new slots are released: the old state is kept, as other paths point to it).
        """
        node = parent
        path = np.concatenate([parent.path, slots])
        owner_cost = 8 * len(path)  # the path array is charged to the first node created
        duplicates = 0
        now = next(self._clock)
        for k, (t, s) in enumerate(zip(tokens, slots.tolist())):
            child = node.children.get(t)
            if child is None:
                child = Node(t, node, s, path[: parent.depth + k + 1], NODE_OVERHEAD + owner_cost)
                self._node_bytes += child.cost
                owner_cost = 0
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
        if node.logprobs is None:
            self._row_bytes += self.row_cost(ids)
        node.logprobs = logprobs
        node.last_used = next(self._clock)
        self._rows[ids] = node

    # ----------------------------------------------------------------- evict
    def evict(self, target_bytes: int | None = None) -> None:
        """Forget least-recently-used entries until ``used_bytes <= target_bytes`` (default:
        the budget); the pool shrinks back to its initial length once nothing is left."""
        target = self.budget_bytes if target_bytes is None else target_bytes
        if self.used_bytes <= target:
            return
        self._evict_until(lambda: self.used_bytes <= target, keep=set())
        if self.used_bytes > target and not self.root.children:
            self._reset()

    def _evict_until(self, done: Callable[[], bool], keep: set[int]) -> None:
        """Evict LRU entries (sparing nodes whose id is in ``keep``) until ``done()``."""
        heap = [
            (n.last_used, id(n), n)
            for n in self._iter_nodes()
            if id(n) not in keep and (n.logprobs is not None or not n.children)
        ]
        heapq.heapify(heap)
        while heap and not done():
            _, _, node = heapq.heappop(heap)
            if node.parent is None:
                continue  # already removed
            if node.logprobs is not None:
                del self._rows[self._ids_of(node)]
                self._row_bytes -= self.row_cost(range(node.depth))
                node.logprobs = None
                self.evictions += 1
            if not node.children:
                parent = node.parent
                del parent.children[node.token]
                node.parent = None
                self._free.append(node.slot)
                self._nodes -= 1
                self._node_bytes -= node.cost
                self.evictions += 1
                if (
                    parent is not self.root
                    and not parent.children
                    and parent.logprobs is None
                    and id(parent) not in keep
                ):
                    heapq.heappush(heap, (parent.last_used, id(parent), parent))

    def _iter_nodes(self) -> Iterator[Node]:
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
        """Forget everything and give the pool's memory back (initial length again)."""
        for node in self._iter_nodes():
            node.parent = None
        self.evictions += self._nodes + len(self._rows)
        self._reset()
