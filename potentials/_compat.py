"""The private APIs of Python's ``re`` and of ``jsonschema`` this project relies on, in one place.

Nothing here is public API upstream, so a new Python or jsonschema release may rename or reshape
it. Every use in the project goes through this module (users in brackets):

    re._parser      parse(pattern, flags) -> tree; tree.data (the items), tree.state.flags
                    (global flags), SubPattern.getwidth() -> (min, max)
                                   [regex.automaton, grammar.potential, regex.completion]
    re._constants   the opcodes and flag bits of those trees (``C`` below), items (op, av)
                    with the av layouts ``subtrees`` and potentials.regex.automaton read
                 [regex.automaton, grammar.potential, regex.relax, regex.completion]
    _sre            unicode_iscased(cp), unicode_tolower(cp): re's own case rules  [regex.automaton]
    jsonschema._utils.equal      jsonschema's JSON equality (1 == 1.0, True != 1)  [json.clauses]
    validator._resolver, validator.evolve(_resolver=r), resolver._base_uri
                    the ``referencing`` resolver a validator carries, to validate a subschema
                    where jsonschema itself would (its base URI and dynamic scope)  [json.clauses]

``problems()`` checks every name above and the shapes the project reads (an item's av layout,
what the resolver returns), and names the module at fault; ``require(group)`` raises
``IncompatibleUpstream`` with those messages, once per process, before the first regex is
compiled or the first schema is read, so an incompatible upgrade fails loudly at the door
instead of building a wrong automaton. tests/potentials/test_compat.py runs the same checks.
"""

from __future__ import annotations

import functools
from typing import Any
from smc.core.errors import SmcSteerError


class IncompatibleUpstream(SmcSteerError, RuntimeError):
    """A private API this project uses changed (see the module docstring)."""


try:
    import _sre
    import re._constants as C
    import re._parser as _sre_parse
except ImportError as err:  # renamed or removed by a newer Python
    raise IncompatibleUpstream(
        f"smc-steer's adapter for private re APIs (potentials/_compat.py) cannot import "
        f"{err.name}: {err}"
    ) from err

#: the names of re._constants the project compares parse items against
USED_CONSTANTS = (
    "ANY", "ASSERT", "ASSERT_NOT", "AT", "ATOMIC_GROUP", "AT_BEGINNING", "AT_BEGINNING_STRING",
    "AT_BOUNDARY", "AT_END", "AT_END_STRING", "AT_NON_BOUNDARY", "BRANCH", "CATEGORY",
    "CATEGORY_DIGIT", "CATEGORY_NOT_DIGIT", "CATEGORY_NOT_SPACE", "CATEGORY_NOT_WORD",
    "CATEGORY_SPACE", "CATEGORY_WORD", "GROUPREF", "GROUPREF_EXISTS", "IN", "LITERAL",
    "MAXREPEAT", "MAX_REPEAT", "MIN_REPEAT", "NEGATE", "NOT_LITERAL", "POSSESSIVE_REPEAT",
    "RANGE", "SRE_FLAG_ASCII", "SRE_FLAG_DOTALL", "SRE_FLAG_IGNORECASE", "SRE_FLAG_MULTILINE",
    "SUBPATTERN",
)


# ---------------------------------------------------------------------------- re's parser


def parse_regex(pattern: str, flags: int = 0) -> Any:
    """re's parse tree of ``pattern`` (re.error on bad syntax, with ``msg`` and ``pos``)."""
    return _sre_parse.parse(pattern, flags)


def tree_items(tree: Any) -> list:
    """The top-level (op, av) items of a parse tree."""
    return tree.data


def tree_flags(tree: Any) -> int:
    """The global flags of a parse tree (those given plus inline ones such as ``(?a)``)."""
    return tree.state.flags


def width(seq: Any) -> tuple[int, int]:
    """(fewest, most) characters a parsed sequence matches (most >= MAXREPEAT: unbounded)."""
    return seq.getwidth()


def subtrees(op: Any, av: Any) -> list:
    """The item sequences nested in item (op, av): a group's body, each alternative, a repeat's
    body, an atomic group, a lookaround's body, a conditional's branches; [] for leaves."""
    if op is C.SUBPATTERN:
        return [av[3]]
    if op is C.BRANCH:
        return list(av[1])
    if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
        return [av[2]]
    if op is C.ATOMIC_GROUP:
        return [av]
    if op in (C.ASSERT, C.ASSERT_NOT):
        return [av[1]]
    if op is C.GROUPREF_EXISTS:
        return [s for s in av[1:] if s is not None]
    return []


def unicode_iscased(cp: int) -> bool:
    """re's own test: does code point ``cp`` take part in case-insensitive matching?"""
    return _sre.unicode_iscased(cp)


def unicode_tolower(cp: int) -> int:
    """re's own lower-casing of code point ``cp`` (what IGNORECASE compares)."""
    return _sre.unicode_tolower(cp)


# ---------------------------------------------------------------------------- jsonschema

@functools.lru_cache(maxsize=1)
def _jsonschema_utils() -> Any:
    # imported on first use: jsonschema takes seconds to import, and regex users never need it
    import jsonschema._utils

    return jsonschema._utils


def json_equal(a: Any, b: Any) -> bool:
    """jsonschema's own JSON equality (what ``enum`` and ``const`` compare with)."""
    return _jsonschema_utils().equal(a, b)


def validator_resolver(validator: Any) -> Any:
    """The ``referencing`` resolver a jsonschema validator evaluates its schema with."""
    return validator._resolver


def with_resolver(validator: Any, schema: Any, resolver: Any) -> Any:
    """``validator`` on ``schema``, evaluated with ``resolver`` (None: the schema's own root)."""
    return validator.evolve(schema=schema, _resolver=resolver)


def base_uri(resolver: Any) -> str:
    """The base URI a resolver resolves relative references against ("" for None)."""
    return "" if resolver is None else resolver._base_uri


# ---------------------------------------------------------------------------- checks


def _versions() -> str:
    import importlib.metadata
    import platform

    try:
        js = importlib.metadata.version("jsonschema")
    except importlib.metadata.PackageNotFoundError:
        js = "?"
    return f"Python {platform.python_version()}, jsonschema {js}"


def _check_re(parser: Any, constants: Any, sre: Any) -> list[str]:
    out: list[str] = []
    missing = [n for n in USED_CONSTANTS if not hasattr(constants, n)]
    if missing:
        out.append(f"re._constants has no {', '.join(missing)}")
        return out
    K = constants
    for fn in ("unicode_iscased", "unicode_tolower"):
        if not callable(getattr(sre, fn, None)):
            out.append(f"_sre has no function {fn}")
    if not out:
        try:
            if not (sre.unicode_iscased(ord("A")) and not sre.unicode_iscased(ord("1"))):
                out.append("_sre.unicode_iscased gives other answers for 'A' and '1'")
            if sre.unicode_tolower(0x212A) != ord("k") or sre.unicode_tolower(ord("A")) != ord("a"):
                out.append("_sre.unicode_tolower gives other answers for 'A' and the Kelvin sign")
        except Exception as err:  # noqa: BLE001 - any failure is the finding
            out.append(f"_sre case functions fail: {type(err).__name__}: {err}")
    if not callable(getattr(parser, "parse", None)):
        out.append("re._parser has no function parse")
        return out
    # pattern -> the items re._parser must give, in the layouts regex.automaton and
    # grammar.potential read
    expect = {
        "ab|cd": [(K.BRANCH, (None, [[(K.LITERAL, 97), (K.LITERAL, 98)],
                                     [(K.LITERAL, 99), (K.LITERAL, 100)]]))],
        "(?i:a)": [(K.SUBPATTERN, (None, K.SRE_FLAG_IGNORECASE, 0, [(K.LITERAL, 97)]))],
        "a{2,3}": [(K.MAX_REPEAT, (2, 3, [(K.LITERAL, 97)]))],
        "a*?": [(K.MIN_REPEAT, (0, K.MAXREPEAT, [(K.LITERAL, 97)]))],
        "a*+": [(K.POSSESSIVE_REPEAT, (0, K.MAXREPEAT, [(K.LITERAL, 97)]))],
        "(?>ab)": [(K.ATOMIC_GROUP, [(K.LITERAL, 97), (K.LITERAL, 98)])],
        "(?<=a)(?!b)": [(K.ASSERT, (-1, [(K.LITERAL, 97)])),
                        (K.ASSERT_NOT, (1, [(K.LITERAL, 98)]))],
        "[^a-c\\d].": [(K.IN, [(K.NEGATE, None), (K.RANGE, (97, 99)),
                               (K.CATEGORY, K.CATEGORY_DIGIT)]), (K.ANY, None)],
        "\\b\\B^$\\A\\Z": [(K.AT, K.AT_BOUNDARY), (K.AT, K.AT_NON_BOUNDARY),
                           (K.AT, K.AT_BEGINNING), (K.AT, K.AT_END),
                           (K.AT, K.AT_BEGINNING_STRING), (K.AT, K.AT_END_STRING)],
        "(a)\\1[^b]": [(K.SUBPATTERN, (1, 0, 0, [(K.LITERAL, 97)])), (K.GROUPREF, 1),
                       (K.NOT_LITERAL, 98)],
        "(a)(?(1)b|c)": [(K.SUBPATTERN, (1, 0, 0, [(K.LITERAL, 97)])),
                         (K.GROUPREF_EXISTS, (1, [(K.LITERAL, 98)], [(K.LITERAL, 99)]))],
    }
    for pattern, want in expect.items():
        try:
            items, want = _plain_seq(parser.parse(pattern, 0).data), _plain_seq(want)
            if items != want:
                out.append(f"re._parser.parse({pattern!r}) gives {items!r}, not {want!r}")
        except Exception as err:  # noqa: BLE001
            out.append(f"re._parser.parse({pattern!r}) fails: {type(err).__name__}: {err}")
    try:
        tree = parser.parse("(?a)ab", 0)
        if not tree.state.flags & K.SRE_FLAG_ASCII:
            out.append("re._parser: tree.state.flags misses the inline (?a) flag")
        if tree.getwidth() != (2, 2):
            out.append(f"re._parser: getwidth() of 'ab' is {tree.getwidth()!r}, not (2, 2)")
    except Exception as err:  # noqa: BLE001
        out.append(f"re._parser trees lack state.flags or getwidth(): {type(err).__name__}: {err}")
    try:
        parser.parse("(", 0)
        out.append("re._parser.parse('(') raises nothing")
    except Exception as err:  # noqa: BLE001
        if not (hasattr(err, "msg") and hasattr(err, "pos")):
            out.append(f"re._parser errors lack msg and pos: {type(err).__name__}")
    return out


def _plain(item: Any) -> Any:
    """An item with nested sequences turned into lists, constants into (name, value)."""
    op, av = item
    return (_name(op), _plain_av(av))


def _plain_av(av: Any) -> Any:
    if isinstance(av, (list, tuple)) or hasattr(av, "data"):
        seq = av.data if hasattr(av, "data") else av
        return [_plain(x) if _is_item(x) else _plain_av(x) for x in seq]
    return _name(av) if _is_constant(av) else av


def _plain_seq(seq: list) -> list:
    return [_plain(i) for i in seq]


def _is_item(x: Any) -> bool:
    return isinstance(x, tuple) and len(x) == 2 and _is_constant(x[0])


def _is_constant(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and type(x) is not int


def _name(x: Any) -> Any:
    return (str(x), int(x)) if _is_constant(x) else x


def _check_jsonschema(utils: Any, validator_cls: Any) -> list[str]:
    out: list[str] = []
    equal = getattr(utils, "equal", None)
    if not callable(equal):
        out.append("jsonschema._utils has no function equal")
    else:
        try:
            if not (equal(1, 1.0) and not equal(True, 1) and equal({"a": [1]}, {"a": [1.0]})
                    and not equal([1, 2], [2, 1])):
                out.append("jsonschema._utils.equal no longer means JSON equality")
        except Exception as err:  # noqa: BLE001
            out.append(f"jsonschema._utils.equal fails: {type(err).__name__}: {err}")
    try:
        import referencing.jsonschema as rjs

        root = {"$id": "https://example.com/root", "$defs": {"n": {"type": "integer"}},
                "$ref": "#/$defs/n"}
        v = validator_cls(root)
        if not hasattr(v, "_resolver"):
            out.append(f"jsonschema validators ({validator_cls.__name__}) have no _resolver")
            return out
        res = v._resolver
        got = res.lookup("#/$defs/n")
        if got.contents != {"type": "integer"} or not hasattr(got, "resolver"):
            out.append("jsonschema: validator._resolver.lookup no longer returns (contents, "
                       "resolver)")
        if not isinstance(getattr(res, "_base_uri", None), str):
            out.append("jsonschema: validator._resolver has no str _base_uri")
        sub = res.in_subresource(rjs.DRAFT202012.create_resource({"$id": "sub/", "type": "string"}))
        if sub._base_uri != "https://example.com/sub/":
            out.append(f"jsonschema: resolver._base_uri is {sub._base_uri!r} in a subresource")
    except Exception as err:  # noqa: BLE001
        out.append(f"jsonschema validators' _resolver fails: {type(err).__name__}: {err}")
        return out
    try:
        # a validator whose own resolver cannot see $defs, evolved onto the root's resolver
        evolved = validator_cls({}).evolve(schema={"$ref": "#/$defs/n"}, _resolver=res)
        ok = evolved.is_valid(1) and not evolved.is_valid("x")
    except Exception:  # noqa: BLE001 - e.g. referencing's Unresolvable: the resolver was dropped
        ok = False
    if not ok:
        out.append("jsonschema: validator.evolve(schema=, _resolver=) does not evaluate with "
                   "the given resolver")
    return out


def problems(group: str | None = None, *, parser: Any = _sre_parse, constants: Any = C,
             sre: Any = _sre, jsonschema_utils: Any = None,
             validator_cls: Any = None) -> list[str]:
    """Every way the private APIs above differ from what the project expects ([] when none).

    Args:
        group: "re" (re._parser, re._constants, _sre), "jsonschema", or None for both.
        parser, constants, sre, jsonschema_utils, validator_cls: the modules checked (the
            real ones by default; tests pass stand-ins to see the messages).
    """
    if group not in (None, "re", "jsonschema"):
        raise ValueError(f'group must be "re", "jsonschema" or None, not {group!r}')
    out = []
    if group in (None, "re"):
        out += _check_re(parser, constants, sre)
    if group in (None, "jsonschema"):
        if validator_cls is None:
            from jsonschema import Draft202012Validator as validator_cls
        if jsonschema_utils is None:
            jsonschema_utils = _jsonschema_utils()
        out += _check_jsonschema(jsonschema_utils, validator_cls)
    return out


@functools.lru_cache(maxsize=None)
def require(group: str) -> None:
    """IncompatibleUpstream listing ``problems(group)`` unless there are none (checked once)."""
    found = problems(group)
    if found:
        raise IncompatibleUpstream(
            f"smc-steer's adapter for private {group} APIs (potentials/_compat.py) does not "
            f"match this {_versions()}:\n  - " + "\n  - ".join(found)
        )
