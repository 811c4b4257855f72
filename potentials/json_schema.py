"""JSON Schema (drafts 4, 6, 7, 2019-09 and 2020-12) as a Boolean byte potential.

    complete(x) = 0  iff  x is UTF-8 JSON text (RFC 8259) in the chosen whitespace style, without
                          duplicate object keys or unpaired surrogate escapes, and
                          V(schema, format_checker=V.FORMAT_CHECKER) accepts json.loads(x), V the
                          jsonschema validator of the draft the schema's ``$schema`` declares
                          (2020-12 when none); else -inf. Patterns are searched with the regex
                          package in bounded time (potentials.json_patterns): a search past its
                          time limit fails the document.
    prefix(x)   = 0  iff  the incremental recognizer (potentials.json_machine) is still alive
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema.exceptions import SchemaError

from potentials.base import NEG_INF, BytePotential
from potentials.json_clauses import Schemas
from potentials.json_machine import Machine
from potentials.json_drafts import DEFAULT, VALIDATORS, draft_of, strip_declarations
from potentials.json_patterns import SCHEMA_FORMATS

#: transitions remembered per potential before the table is cleared
MEMO_LIMIT = 200_000


class JSONState:
    """Recognizer configurations plus the text read so far (a persistent list of chunks) and
    its length in bytes."""

    __slots__ = ("configs", "chunks", "size")

    def __init__(self, configs: frozenset, chunks: tuple | None, size: int = 0):
        self.configs, self.chunks, self.size = configs, chunks, size

    def text(self) -> bytes:
        parts = []
        node = self.chunks
        while node is not None:
            parts.append(node[0])
            node = node[1]
        return b"".join(reversed(parts))


class JSONSchema(BytePotential[JSONState]):
    """Documents valid under a JSON Schema, checked byte by byte.

    The draft is the one the root's ``$schema`` names (drafts 4, 6, 7, 2019-09, 2020-12; none:
    2020-12; any other: ValueError); a subschema declaring another draft follows that draft.
    Facts are drawn from each draft's keywords (``id``/``$id``, ``definitions``, array-form
    ``items`` with ``additionalItems``, ``$ref`` overriding its siblings up to draft 7,
    ``$recursiveRef``), and scalar and final checks run that draft's validator
    (potentials.json_drafts).

    Args:
        schema: the schema, as a dict, a boolean, or JSON text.
        whitespace: "compact" (no whitespace outside strings), "flexible" (any RFC 8259
            whitespace between tokens), or an int n (runs of at most n whitespace bytes).
        registry: a ``referencing.Registry`` of further schemas that ``$ref`` may name;
            nothing is ever fetched from the network.

    Enforced while the document is read (a prefix dies as soon as it breaks one of these):
    the JSON grammar and UTF-8; ``type``; ``enum``/``const``; ``properties``,
    ``patternProperties``, ``additionalProperties``, ``propertyNames``, ``required``,
    ``min/maxProperties``; ``prefixItems``, ``items``, ``min/maxItems``; ``minLength``,
    ``maxLength`` (characters after decoding escapes) and ``pattern`` (an unanchored search,
    run as a byte automaton); boolean schemas; ``$ref``/``$defs`` (recursion expanded lazily);
    ``allOf``, and ``anyOf``/``oneOf`` read as disjunctions. When a string, number, ``true``,
    ``false`` or ``null`` ends, it is validated against every schema that applies to it, so
    ``format``, numeric bounds, ``multipleOf``, ``not``, ``if``/``then``/``else``, ``oneOf``
    exclusivity and non-regular patterns are exact at that point. When an object or array
    closes, the schemas with keywords about the whole container that no fact enforces
    (``oneOf`` exclusivity, ``not``, ``if``, ``uniqueItems``, ``contains``, ``dependencies``,
    ``dependent*``, ``unevaluated*``, disjunctions too wide to split) validate it, so its
    closing bracket is dead when it fails them. No keyword is ignored: ``complete`` runs the
    validator on the whole document.

    Where prefix viability is approximate (a prefix is kept that can no longer be completed):
    a number is judged only when it ends (``{"a": 15`` stays alive under ``maximum: 9`` until
    the next byte); container keywords above are judged at the closing bracket; a key whose
    value schema is unsatisfiable dies at its closing quote; ``$dynamicRef`` (and
    ``$recursiveRef`` with more than one ``$recursiveAnchor`` in reach) is only checked by the
    validator at ``complete``. A viable prefix is never rejected. docs/constraints/json-schema.md
    lists what is decided when, per draft.

    Departures from plain ``json.loads`` + validation: duplicate object keys and ``\\u``
    escapes of unpaired surrogates are rejected, and integers too long for Python's ``int``
    conversion limit fail at ``complete``.
    """

    def __init__(
        self,
        schema: dict | bool | str,
        whitespace: str | int = "compact",
        registry: Any = None,
    ):
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as err:
                raise ValueError(f"schema is not valid JSON: {err}") from None
        if not isinstance(schema, (dict, bool)):
            raise TypeError(
                f"schema must be a dict, a bool or JSON text, not {type(schema).__name__}"
            )
        lookup = None if registry is None else registry.contents
        draft = DEFAULT
        if isinstance(schema, dict) and "$schema" in schema:
            draft = draft_of(schema["$schema"], lookup=lookup)
        cls = VALIDATORS[draft]
        try:
            cls.check_schema(schema, format_checker=SCHEMA_FORMATS)
            stripped = strip_declarations(schema, draft, lookup)
        except SchemaError as err:
            where = "/".join(str(p) for p in err.path) or "(root)"
            msg = err.message
            if len(msg) > 300:  # jsonschema puts the (long) offending value first, the reason last
                msg = msg[:120] + " ... " + msg[-160:]
            raise ValueError(f"invalid JSON Schema ({draft}) at {where}: {msg}") from None
        except RecursionError:
            raise ValueError(
                f"schema is nested too deeply (JSON nesting depth {_depth(schema)}): checking it "
                f"against the {draft} metaschema exceeds Python's recursion limit"
            ) from None
        if whitespace == "compact":
            limit: int | None = 0
        elif whitespace == "flexible":
            limit = None
        elif isinstance(whitespace, int) and not isinstance(whitespace, bool) and whitespace >= 0:
            limit = whitespace
        else:
            raise ValueError(
                f'whitespace must be "compact", "flexible" or an int >= 0, not {whitespace!r}'
            )
        kwargs = {"format_checker": cls.FORMAT_CHECKER}
        if registry is not None:
            kwargs["registry"] = registry
        self.schema = schema
        self.whitespace = whitespace
        self.draft = draft
        self.validator = cls(stripped, **kwargs)

        def make(other: str) -> Any:
            # a nested subschema declaring another draft: jsonschema validates it with that
            # draft's class but keeps the root's format checker (evolve carries it), and so
            # does this
            return VALIDATORS[other](stripped, **kwargs)

        try:
            self.schemas = Schemas(self.validator.schema, self.validator, draft, make)
            self.schemas.check_refs()
            self.machine = Machine(self.schemas.expand([self.schemas.root]), limit)
        except RecursionError:
            raise ValueError(
                f"schema is nested too deeply (JSON nesting depth {_depth(schema)}) to compile"
            ) from None
        self._memo: dict = {}
        self._canon: dict = {}
        self._starts: dict = {}
        self._initial = JSONState(self.machine.initial(), None)

    def __repr__(self) -> str:
        return f"JSONSchema({self.schema!r}, whitespace={self.whitespace!r})"

    def initial(self) -> JSONState:
        return self._initial

    def advance(self, state: JSONState, data: bytes) -> JSONState | None:
        configs = state.configs
        memo = self._memo
        if len(memo) > MEMO_LIMIT:
            memo.clear()
            self._canon.clear()
        for i, b in enumerate(data):
            key = (configs, b)
            got = memo.get(key)
            if got is None:
                nxt = self.machine.step(configs, b) if configs else configs
                # one object per distinct set of configurations: later lookups keyed by it then
                # match by identity instead of comparing stacks frame by frame
                nxt = self._canon.setdefault(nxt, nxt)
                got = memo[key] = (nxt, self.machine.pending(nxt))
            nxt, pending = got
            if pending:  # a checked container opened or closed at this byte
                nxt = self.machine.settle(
                    nxt, state.size + i, lambda: state.text() + bytes(data[: i + 1])
                )
                nxt = self._canon.setdefault(nxt, nxt)
            if not nxt:
                return None
            configs = nxt
        if not data:
            return JSONState(configs, state.chunks, state.size)
        return JSONState(configs, (bytes(data), state.chunks), state.size + len(data))

    def mask_key(self, state: JSONState) -> Any:
        """The recognizer configurations, plus the text since the first still-open container
        that is checked when it closes (advance reads that text at its closing bracket, and
        nothing else of the text), so particles with equal keys share one lifted mask."""
        start = self._open_start(state.configs)
        if start is None:
            return state.configs
        return (state.configs, state.text()[start:])

    def _open_start(self, configs: frozenset) -> int | None:
        """The smallest offset at which a checked container still open in ``configs`` starts."""
        got = self._starts.get(configs, self)
        if got is self:
            if len(self._starts) > MEMO_LIMIT:
                self._starts.clear()
            got = self._starts[configs] = self.machine.open_start(configs)
        return got

    def plain_text_budget(self, state: JSONState) -> float | None:
        return self.machine.plain_text_budget(state.configs)

    def plain_text_key(self, state: JSONState) -> tuple[Any, float] | None:
        return self.machine.plain_text_key(state.configs)

    def inner_text_key(self, state: JSONState) -> tuple[Any, bytes] | None:
        key = self.machine.inner_text_key(state.configs)
        return None if key is None else (key, b'"')

    async def state_prefix(self, state: JSONState) -> float:
        return 0.0 if state.configs else NEG_INF

    async def state_complete(self, state: JSONState) -> float:
        return 0.0 if self.accepts_state(state) else NEG_INF

    def accepts_state(self, state: JSONState) -> bool:
        """Is the text behind ``state`` a finished, valid document?"""
        if not self.machine.finished(state.configs):
            return False
        try:
            value = json.loads(state.text())
        except (ValueError, RecursionError):  # an integer beyond Python's digit limit, or
            return False  # nesting deeper than json's recursion limit
        try:
            return self.validator.is_valid(value)
        except Exception:  # the validator itself cannot decide (e.g. a regex it cannot run)
            return False


def _depth(schema: Any) -> int:
    """The nesting depth of a JSON value (iteratively: it is called on values too deep to
    recurse over)."""
    deepest, todo = 0, [(schema, 1)]
    while todo:
        v, d = todo.pop()
        deepest = max(deepest, d)
        if isinstance(v, dict):
            todo += [(x, d + 1) for x in v.values()]
        elif isinstance(v, list):
            todo += [(x, d + 1) for x in v]
    return deepest
