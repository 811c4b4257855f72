"""JSON Schema (drafts 4, 6, 7, 2019-09 and 2020-12) as a Boolean byte potential.

    complete(x) = 0  iff  x is UTF-8 JSON text (RFC 8259) in the chosen whitespace style, without
                          duplicate object keys or unpaired surrogate escapes, and
                          V(schema, format_checker=V.FORMAT_CHECKER) accepts json.loads(x), V the
                          jsonschema validator of the draft the schema's ``$schema`` declares
                          (2020-12 when none), and every number a schema allows only as an
                          integer is written as one (``1``, not ``1.0`` or ``1e0``); else -inf.
                          Patterns are searched with the regex package in bounded time
                          (potentials.json.patterns): a search past its time limit fails the
                          document.
    prefix(x)   = 0  iff  the incremental recognizer (potentials.json.machine) is still alive

A pydantic v2 model class M is a schema too: ``JSONSchema(M)`` uses M.model_json_schema() (its
validation-mode schema, Draft 2020-12) and adds M's own validation at completion,

    complete_M(x) = complete_{schema(M)}(x)  if M.model_validate_json(x) succeeds, else -inf

so validators that no schema expresses (``field_validator``, ``model_validator``, strict types)
hold for every finished sample, and ``parse`` (and ``smc.Result.parsed``) gives M instances.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Mapping

from jsonschema.exceptions import SchemaError
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from smc.core.errors import InvalidArgument, InvalidArgumentType
from smc.core.logmath import NEG_INF
from potentials.base import BytePotential
from potentials.json.clauses import Schemas
from potentials.json.machine import Machine, remembered
from potentials.json.drafts import DEFAULT, VALIDATORS, draft_of, strip_declarations
from potentials.json.patterns import SCHEMA_FORMATS
from potentials.json.strict import closed_schema

#: sets of configurations whose next bytes and open start are kept before the table is cleared
MEMO_LIMIT = 50_000
#: sets of configurations whose transitions are remembered before the table is cleared. A
#: mask's walks reuse rows only among themselves, and every row kept longer is objects the
#: garbage collector walks and promotes: on MaskBench masks 50,000 rows cost ~3x the
#: collector's passes of 64 for the same compute. What a small table loses is a set reached
#: again much later (a structure repeated after a string), stepped again: ~3 us per check.
STEP_MEMO_LIMIT = 64
#: states ``completion`` visits before it gives up. Set, not tuned: with it the budget twist
#: stayed at 5% of the wall time on the side-by-side selection, as with the byte searches
#: alone (benchmarks/RESULTS.md, "bench_critic.py", third run)
COMPLETION_NODES = 200
#: whitespace bytes ``whitespace="flexible"`` allows after the root value. None, as the masking
#: engines do: a few-shot model wants to go on after the document, and a particle that writes
#: blank lines there instead pays for each and then for an EOS the model rarely puts after them.
#: Against 2 bytes, on the JSON tasks at N = 4: collapsed runs 8 -> 3 of 120, log Ẑ +1.1 nats
#: (benchmarks/RESULTS.md, "Whitespace after the document")
END_WHITESPACE = 0
_DIGITS = b"0123456789"
#: first byte of a JSON value -> the bytes it can end with
_LAST_BY_FIRST = {ord("{"): b"}", ord("["): b"]", ord('"'): b'"', ord("-"): _DIGITS,
                  **{d: _DIGITS for d in _DIGITS}, ord("t"): b"e", ord("f"): b"e", ord("n"): b"l"}


class JSONState:
    """Recognizer configurations plus the text read so far (a persistent list of chunks) and
    its length in bytes."""

    __slots__ = ("configs", "chunks", "size", "accepted")

    def __init__(self, configs: frozenset, chunks: tuple | None, size: int = 0):
        self.configs, self.chunks, self.size = configs, chunks, size
        # JSONSchema.accepts_state's verdict once asked (a finished document is validated whole,
        # and samplers ask about one context more than once: its support, then its EOS)
        self.accepted: bool | None = None

    def text(self) -> bytes:
        parts = []
        node = self.chunks
        while node is not None:
            parts.append(node[0])
            node = node[1]
        return b"".join(reversed(parts))


#: values a schema may hold once shared sub-objects are unfolded (JSON text of that many values
#: is ~10 MB; reading a schema is linear in this size, so a Python DAG that unfolds to 2^60
#: values is refused instead of walked)
MAX_SCHEMA_VALUES = 1_000_000


def check_tree(schema: Any, what: str = "schema") -> None:
    """InvalidArgument unless ``schema`` is a tree of at most MAX_SCHEMA_VALUES values: no dict
    or list inside it contains itself, and unfolding shared sub-objects stays within the limit.

    JSON text is always a tree, but a Python dict may hold itself (``s["properties"] = {"a":
    s}``), and everything that reads a schema (the metaschema check, the compiler) would then
    recurse or grow without end. Recursion in a schema is written with ``$ref``. A sub-object
    shared by several parents (a DAG) reads as the tree it unfolds to, whose size is
    size(v) = 1 + sum of its children's sizes, computed once per object. Iterative depth-first
    search with the usual three colours, so each container is walked once: O(objects).
    """
    on_path: set[int] = set()
    size: dict[int, int] = {}
    stack: list[tuple[Any, Any, list[str]]] = []

    def children(node: Any) -> Any:
        return node.items() if isinstance(node, dict) else enumerate(node)

    def enter(node: Any, path: list[str]) -> None:
        on_path.add(id(node))
        stack.append((node, iter(children(node)), path))

    if isinstance(schema, (dict, list)):
        enter(schema, [])
    while stack:
        node, items, path = stack[-1]
        for key, child in items:
            if not isinstance(child, (dict, list)) or id(child) in size:
                continue
            where = _where(path + [str(key)])
            if id(child) in on_path:
                raise InvalidArgument(
                    f"{what} is not a tree: the {type(child).__name__} at {where} contains itself "
                    "(a Python object that holds itself); write recursion with \"$ref\"")
            enter(child, path + [str(key)])
            break
        else:
            stack.pop()
            on_path.discard(id(node))
            total = 1 + sum(size.get(id(c), 1) if isinstance(c, (dict, list)) else 1
                            for _, c in children(node))
            if total > MAX_SCHEMA_VALUES:
                where = _where(path)
                raise InvalidArgument(
                    f"{what} is too large: the value at {where} holds more than "
                    f"{MAX_SCHEMA_VALUES:,} values once its shared sub-objects are unfolded")
            size[id(node)] = total


def _where(path: list[str]) -> str:
    """A JSON path for a message: "(root)", or the path, its middle cut when it is long."""
    text = "/".join(path) or "(root)"
    return text if len(text) <= 80 else f"{text[:30]}/.../{text[-40:]} ({len(path)} levels down)"


def _registry(registry: Any) -> Any:
    """A ``referencing.Registry`` from ``registry``: one as given, a mapping {URI: schema} as the
    registry of those schemas (each read by its own ``$schema``, else draft 2020-12), None as
    None; InvalidArgumentType for anything else."""
    if registry is None or isinstance(registry, Registry):
        return registry
    if isinstance(registry, Mapping):
        for uri, schema in registry.items():
            if not isinstance(uri, str) or not isinstance(schema, (dict, bool)):
                raise InvalidArgumentType(
                    f"registry must map URIs (strings) to schemas (dicts or booleans), got "
                    f"{type(uri).__name__} -> {type(schema).__name__}")
            check_tree(schema, f"the registry's schema {uri!r}")
        return Registry().with_contents(registry.items(), default_specification=DRAFT202012)
    raise InvalidArgumentType(
        f"registry must be a referencing.Registry or a dict from URIs to schemas, got {type(registry).__name__}")


class JSONSchema(BytePotential[JSONState]):
    """Documents valid under a JSON Schema, checked byte by byte.

    The draft is the one the root's ``$schema`` names (drafts 4, 6, 7, 2019-09, 2020-12; none:
    2020-12; any other: ValueError); a subschema declaring another draft follows that draft.
    Facts are drawn from each draft's keywords (``id``/``$id``, ``definitions``, array-form
    ``items`` with ``additionalItems``, ``$ref`` overriding its siblings up to draft 7,
    ``$recursiveRef``), and scalar and final checks run that draft's validator
    (potentials.json.drafts).

    Args:
        schema: the schema, as a dict, a boolean, JSON text, or a pydantic v2 ``BaseModel``
            subclass M (the schema is M.model_json_schema(), and a finished document must also
            pass M.model_validate_json; see the module docstring).
        whitespace: "compact" (no whitespace outside strings), "flexible" (any RFC 8259
            whitespace between tokens, and ``END_WHITESPACE`` = 0 bytes after the root value),
            or an int n (runs of at most n whitespace bytes, the one after the root value
            too).
        registry: a ``referencing.Registry`` of further schemas that ``$ref`` may name, or a
            dict {URI: schema} of them; nothing is ever fetched from the network.
        strict: close the schema's open objects and tuples where that only narrows it (no keys
            or items the schema does not name; potentials.json.strict) and generate under the
            closed schema; every finished document is valid under ``schema`` as well.

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
    escapes of unpaired surrogates are rejected; where a schema allows integers and no other
    numbers a number is an integer literal (from draft 6 on 1.0 is an integer too, but a
    particle writing one can run on in fraction digits that only an exponent would close;
    llguidance, xgrammar, outlines and genlm-control write integers so too);
    and integers too long for Python's ``int`` conversion limit fail at ``complete``.
    """

    # inside a string the keys hold only room, pattern automata (compared by identity) and
    # their states; escapes, UTF-8 and control bytes are read alike by every schema
    shares_text_keys = True

    def __init__(
        self,
        schema: dict | bool | str,
        whitespace: str | int = "flexible",
        registry: Any = None,
        strict: bool = False,
    ):
        self.model = _pydantic_model(schema)
        if self.model is not None:
            schema = _model_schema(self.model)
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as err:
                raise ValueError(f"schema is not valid JSON: {err}") from None
        if not isinstance(schema, (dict, bool)):
            raise TypeError(
                "schema must be a dict, a bool, JSON text or a pydantic BaseModel subclass, "
                f"not {type(schema).__name__}"
            )
        check_tree(schema)
        registry = _registry(registry)
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
            end_limit = 0
        elif whitespace == "flexible":
            limit, end_limit = None, END_WHITESPACE
        elif isinstance(whitespace, int) and not isinstance(whitespace, bool) and whitespace >= 0:
            limit = end_limit = whitespace
        else:
            raise ValueError(
                f'whitespace must be "compact", "flexible" or an int >= 0, not {whitespace!r}'
            )
        if not isinstance(strict, bool):
            raise InvalidArgumentType(f"strict must be True or False, not {strict!r}")
        kwargs = {"format_checker": cls.FORMAT_CHECKER}
        if registry is not None:
            kwargs["registry"] = registry
        self.schema = schema
        self.whitespace = whitespace
        self.registry = registry
        self.strict = strict
        self.draft = draft
        # strict: generation follows the closed schema, and a finished document is checked
        # against the schema as given too (potentials.json.strict)
        self.given = cls(stripped, **kwargs) if strict else None
        if strict:
            stripped = closed_schema(stripped, draft)
        self.validator = cls(stripped, **kwargs)

        def make(other: str) -> Any:
            # a nested subschema declaring another draft: jsonschema validates it with that
            # draft's class but keeps the root's format checker (evolve carries it), and so
            # does this
            return VALIDATORS[other](stripped, **kwargs)

        try:
            self.schemas = Schemas(self.validator.schema, self.validator, draft, make)
            self.schemas.check_refs()
            self.machine = Machine(self.schemas.expand([self.schemas.root]), limit, end_limit)
        except RecursionError:
            raise ValueError(
                f"schema is nested too deeply (JSON nesting depth {_depth(schema)}) to compile"
            ) from None
        self._memo: dict = {}
        self._canon: dict = {}
        self._starts: dict = {}
        self._last_text: tuple = (None, b"")  # (chunks, their text) of the last mask_key
        self._next: dict = {}
        self._completion_keys: dict = {}
        self._initial = JSONState(self.machine.initial(), None)
        self._final: bytes | None = None

    def __repr__(self) -> str:
        what = repr(self.schema) if self.model is None else self.model.__qualname__
        strict = ", strict=True" if self.strict else ""
        return f"JSONSchema({what}, whitespace={self.whitespace!r}{strict})"

    def parse(self, text: str | bytes) -> Any:
        """The value of a document this potential accepts: M.model_validate_json(text) (an M
        instance) for a pydantic model M, else json.loads(text).

        ValueError naming the problem when ``complete(text)`` is -inf (not JSON in this
        whitespace style, or invalid under the schema or the model)."""
        data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
        state = self._initial
        for i in range(len(data)):
            state = self.advance(state, data[i : i + 1])
            if state is None:
                raise ValueError(
                    f"document is not valid under the schema (whitespace={self.whitespace!r}) "
                    f"from byte {i} on: {_clip(data)}"
                )
        if not self.machine.finished(state.configs):
            raise ValueError(
                f"document is incomplete, or its last value is not valid under the schema: "
                f"{_clip(data)}"
            )
        # pydantic's own ValidationError (a ValueError) names the failing fields
        value = json.loads(data) if self.model is None else self.model.model_validate_json(data)
        if not self.accepts_state(state):
            raise ValueError(f"document is not valid under the schema: {_clip(data)}")
        return value

    def __reduce__(self) -> tuple:
        # pickled as its arguments (a checkpoint stores the constraint): the compiled validators
        # are local classes that pickle cannot name, and compiling again gives the same potential
        return (type(self), (self.schema, self.whitespace, self.registry, self.strict))

    def initial(self) -> JSONState:
        return self._initial

    def advance(self, state: JSONState, data: bytes) -> JSONState | None:
        configs = state.configs
        memo = self._memo
        if len(memo) > STEP_MEMO_LIMIT:
            memo.clear()
            self._canon.clear()
        # the transitions out of one set of configurations, keyed by byte (and by the bytes of
        # a plain run): a lookup allocates nothing
        row = memo.get(configs)
        if row is None:
            row = memo[configs] = {}
        if len(data) > 1 and configs and type(data) is bytes:  # plain text in strings: one step
            got = row.get(data)
            if got is None:
                got = self.machine.plain_run(configs, data)
                got = row[data] = False if got is None else self._canon.setdefault(got, got)
            if got is not False:
                return JSONState(got, (bytes(data), state.chunks), state.size + len(data)) if got else None
        for i, b in enumerate(data):
            got = row.get(b)
            if got is None:
                nxt = self.machine.step(configs, b) if configs else configs
                # one object per distinct set of configurations: later lookups keyed by it then
                # match by identity instead of comparing stacks frame by frame
                nxt = self._canon.setdefault(nxt, nxt)
                got = row[b] = (nxt, self.machine.pending(nxt))
            nxt, pending = got
            if pending:  # a checked container opened or closed at this byte
                nxt = self.machine.settle(
                    nxt, state.size + i, lambda: state.text() + bytes(data[: i + 1])
                )
                nxt = self._canon.setdefault(nxt, nxt)
            if not nxt:
                return None
            configs = nxt
            if i + 1 < len(data):
                row = memo.get(configs)
                if row is None:
                    row = memo[configs] = {}
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
        # the text of the last state asked (a state's ``alternatives`` share its text: each
        # asks for its key, and decoding the chunks costs as much as the document is long)
        last = self._last_text
        if last[0] is not state.chunks:
            last = self._last_text = (state.chunks, state.text())
        return (state.configs, last[1][start:])

    def completion_key(self, state: JSONState) -> Any:
        """The recognizer configurations with each plain string's length reduced to the
        characters it still needs (``Machine.completion_key``), and without the text: the text
        inside an open container changes what its closing bracket accepts only in rare cases
        (uniqueItems, checks at the end), not how far away that bracket is."""
        return remembered(self._completion_keys, state.configs, self.machine.completion_key, MEMO_LIMIT)

    def committed(self, state: JSONState) -> bytes:
        """The rest of a key or enum/const value the text has begun, with its closing quote,
        as far as every candidate still agrees (``Machine.committed``); b"" elsewhere."""
        return self.machine.committed(state.configs)

    def completion(self, state: JSONState) -> bytes | None:
        """A y with accepts_state(advance(state, y)), found by a depth-first search over the
        schema's moves (``Machine.completion_moves``: close what is open, write the required
        keys still missing, the shortest values), which never revisits a completion key;
        None past COMPLETION_NODES states. Where the byte-by-byte search of the budget twist
        writes ever new keys into an open object, this one writes the keys it needs."""
        path = [(state, 0, b"", self.machine.completion_moves(state.configs))]
        seen = {self.completion_key(state)}
        nodes = 1
        while path:
            s, i, _, moves = path[-1]
            if i == 0 and self.accepts_state(s):
                return b"".join(chunk for _, _, chunk, _ in path)
            if i == len(moves):
                path.pop()
                continue
            path[-1] = (s, i + 1, path[-1][2], moves)
            child = self.advance(s, moves[i])
            if child is None:
                continue
            key = self.completion_key(child)
            if key in seen:
                continue
            if nodes >= COMPLETION_NODES:
                return None
            seen.add(key)
            nodes += 1
            path.append((child, 0, moves[i], self.machine.completion_moves(child.configs)))
        return None

    def _open_start(self, configs: frozenset) -> int | None:
        """The smallest offset at which a checked container still open in ``configs`` starts."""
        return remembered(self._starts, configs, self.machine.open_start, MEMO_LIMIT)

    def final_bytes(self) -> bytes:
        """The last byte of each kind of root value the schema lets start (a value's first
        byte fixes its last: ``{`` -> ``}``, a digit or ``-`` -> a digit, ``t``/``f`` -> ``e``,
        ...), and whitespace where a document may end with some."""
        if self._final is None:
            last: set[int] = set()
            for first, ends in _LAST_BY_FIRST.items():
                if self.advance(self._initial, bytes((first,))) is not None:
                    last.update(ends)
            if self.machine.end_ws_limit != 0:
                last.update(b" \t\n\r")
            self._final = bytes(sorted(last))
        return self._final

    def next_bytes(self, state: JSONState) -> frozenset | None:
        return remembered(self._next, state.configs, self.machine.next_bytes, MEMO_LIMIT)

    def alternatives(self, state: JSONState) -> list[JSONState] | None:
        """One state per configuration when there are several and each is inside a string
        (where each may take a shortcut of its own); the configurations step independently."""
        configs = state.configs
        if len(configs) < 2 or not self.machine.all_in_strings(configs):
            return None
        return [JSONState(self._canon.setdefault(one, one), state.chunks, state.size)
                for one in (frozenset((c,)) for c in configs)]

    def plain_text_budget(self, state: JSONState) -> float | None:
        return self.machine.plain_text_budget(state.configs)

    def plain_text_key(self, state: JSONState) -> tuple[Any, float] | None:
        return self.machine.plain_text_key(state.configs)

    def plain_text_automata(self, key: Any) -> list[list[tuple[Any, int]]]:
        """The key's configurations' pattern automata in their states (one alternative per
        configuration): plain text adds its bytes to every automaton of the string."""
        return [list(zip(dfas, states)) for dfas, states in key]

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
        if state.accepted is None:
            state.accepted = self._accepts_document(state)
        return state.accepted

    def _accepts_document(self, state: JSONState) -> bool:
        """``accepts_state`` for a state whose configurations finish the document."""
        try:
            value = json.loads(state.text())
        except (ValueError, RecursionError):  # an integer beyond Python's digit limit, or
            return False  # nesting deeper than json's recursion limit
        try:
            if not self.validator.is_valid(value):
                return False
            if self.given is not None and not self.given.is_valid(value):
                return False
        except Exception:  # the validator itself cannot decide (e.g. a regex it cannot run)
            return False
        if self.model is None:
            return True
        # an exception other than pydantic's ValidationError (a ValueError) comes from a
        # user validator's own bug and is raised, not read as a verdict
        try:
            self.model.model_validate_json(state.text())
        except ValueError:
            return False
        return True


def _clip(data: bytes, limit: int = 80) -> str:
    return repr(data[:limit]) + (f" ... ({len(data)} bytes)" if len(data) > limit else "")


def _pydantic_model(schema: Any) -> type | None:
    """``schema`` if it is a pydantic v2 model class, else None; TypeError for a model instance
    or a pydantic v1 model. pydantic is looked up in sys.modules, never imported: a model class
    can only exist once its module is loaded."""
    pyd = sys.modules.get("pydantic")
    if pyd is None or not hasattr(pyd, "BaseModel"):
        return None
    if isinstance(schema, pyd.BaseModel):
        raise TypeError(
            f"schema is an instance of the pydantic model {type(schema).__name__}; pass the "
            f"class itself: JSONSchema({type(schema).__name__})"
        )
    if not isinstance(schema, type):
        return None
    v1 = sys.modules.get("pydantic.v1")
    if issubclass(schema, pyd.BaseModel) and hasattr(schema, "model_json_schema"):
        return schema
    if issubclass(schema, pyd.BaseModel) or (v1 is not None and issubclass(schema, v1.BaseModel)):
        raise TypeError(
            f"{schema.__name__} is a pydantic v1 model (pydantic.v1.BaseModel, or pydantic 1.x "
            "installed); JSONSchema takes pydantic v2 models (pydantic.BaseModel)"
        )
    return None


def _model_schema(model: type) -> dict:
    """model.model_json_schema() (validation mode), ValueError when pydantic cannot make one."""
    try:
        return model.model_json_schema()
    except Exception as err:  # PydanticInvalidForJsonSchema, PydanticUserError (not built), ...
        raise ValueError(
            f"cannot build a JSON Schema from the pydantic model {model.__name__}: "
            f"{type(err).__name__}: {err}"
        ) from None


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
