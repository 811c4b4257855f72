"""Choice: the text is one of a fixed list of strings.

With S the set of the UTF-8 encodings of the given strings:

    complete(x) = 0 if x in S else -inf          prefix(x) = 0 if x is a prefix of some s in S else -inf

The strings are stored as a byte trie, node 0 the root: the state is a node, advancing follows
one edge per byte (O(1) each), and both weights are exact. A node's ``mask_key`` and
``complete_key`` number its subtree up to equality (a node's future is its subtree), so lifted
masks are shared by nodes with the same future (every option's end, common suffixes).
"""

from __future__ import annotations

from typing import Collection, Hashable, Sequence

from smc.core.errors import InvalidArgument, InvalidArgumentType
from smc.core.logmath import NEG_INF
from potentials.base import BytePotential


class Choice(BytePotential[int]):
    """The text is exactly one of ``options`` (a non-empty sequence of str; repeats allowed,
    the empty string allowed).

    Raises InvalidArgumentType for a non-sequence or a non-str option, InvalidArgument for an
    empty list or an option that is not valid Unicode (a lone surrogate).
    """

    def __init__(self, options: Sequence[str]):
        if isinstance(options, (str, bytes)) or not isinstance(options, Sequence):
            raise InvalidArgumentType(
                f"Choice takes a list of strings, got {type(options).__name__}")
        if not options:
            raise InvalidArgument("Choice needs at least one option")
        encoded: list[bytes] = []
        for k, s in enumerate(options):
            if not isinstance(s, str):
                raise InvalidArgumentType(f"Choice option {k} must be a str, got {type(s).__name__}")
            try:
                encoded.append(s.encode("utf-8"))
            except UnicodeEncodeError:
                raise InvalidArgument(f"Choice option {k} is not valid Unicode: {s!r}") from None
        self.options = tuple(options)
        # node -> {byte: child}; node -> is the end of an option
        self._children: list[dict[int, int]] = [{}]
        self._final: list[bool] = [False]
        for data in encoded:
            node = 0
            for b in data:
                nxt = self._children[node].get(b)
                if nxt is None:
                    nxt = len(self._children)
                    self._children[node][b] = nxt
                    self._children.append({})
                    self._final.append(False)
                node = nxt
            self._final[node] = True
        self._last = bytes(sorted({d[-1] for d in encoded if d}))
        self._future = self._futures()

    def __repr__(self) -> str:
        return f"Choice({list(self.options)!r})"

    def __reduce__(self) -> tuple:
        return (type(self), (self.options,))

    def initial(self) -> int:
        return 0

    def advance(self, state: int, data: bytes) -> int | None:
        children = self._children
        node: int | None = state
        for b in data:
            node = children[node].get(b)
            if node is None:
                return None
        return node

    async def state_complete(self, state: int) -> float:
        return 0.0 if self._final[state] else NEG_INF

    def is_final(self, state: int) -> bool:
        """Is the text behind ``state`` one of the options? (state_complete, synchronously)"""
        return self._final[state]

    def _futures(self) -> list[int]:
        """Node -> the number of its future: nodes with equal subtrees (the same texts complete
        them) get one number, e.g. every option's last node, so they share lifted masks."""
        ids: dict[tuple, int] = {}
        out = [0] * len(self._children)
        # children are numbered after their parents, so a reverse sweep sees them first
        for node in range(len(self._children) - 1, -1, -1):
            sig = (self._final[node],
                   tuple(sorted((b, out[c]) for b, c in self._children[node].items())))
            out[node] = ids.setdefault(sig, len(ids))
        return out

    def mask_key(self, state: int) -> Hashable:
        return self._future[state]

    def complete_key(self, state: int) -> Hashable:
        return self._future[state]

    def next_bytes(self, state: int) -> Collection[int]:
        return self._children[state].keys()

    def final_bytes(self) -> bytes:
        return self._last
