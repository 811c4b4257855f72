"""Pydantic v2 models as schemas: ``JSONSchema(Model)``, its completion check, ``Result.parsed``."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import enum
import json
import math
import uuid
from typing import Annotated, Callable, Literal, Optional, Union

import numpy as np
import pytest
from jsonschema import Draft202012Validator
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    ValidationError,
    conint,
    constr,
    field_validator,
)

import smc
from smc.core.logmath import NEG_INF
from potentials.json import JSONSchema
from potentials.regex import Regex
from potentials.testing import MaskKeyContract
from tests.toy_problems import FastToyLM


class Point(BaseModel):
    """x must be even: a rule its JSON Schema cannot state, only pydantic checks it."""

    model_config = ConfigDict(extra="forbid")
    x: int
    y: Literal["a", "b"]

    @field_validator("x")
    @classmethod
    def even(cls, v: int) -> int:
        if v % 2:
            raise ValueError("x must be even")
        return v


class Inner(BaseModel):
    tags: list[str]


class Outer(BaseModel):
    name: str
    inner: Optional[Inner] = None
    score: float = 0.0


class Color(enum.Enum):
    red = "red"
    green = "green"


class Tree(BaseModel):
    v: int
    kids: list["Tree"] = []


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: conint(ge=0, le=9)


class Dog(BaseModel):
    kind: Literal["dog"]
    name: constr(pattern=r"^[A-Z][a-z]+$")


class Zoo(BaseModel):
    """Most of what pydantic turns into JSON Schema: a discriminated union, an enum, formats
    (date, date-time, uuid), a decimal (a string with a lookahead pattern), bounds, a map, a
    tuple, defaults."""

    pets: list[Annotated[Union[Cat, Dog], Field(discriminator="kind")]]
    color: Color
    when: datetime.date
    at: Optional[datetime.datetime] = None
    price: decimal.Decimal
    id: uuid.UUID
    ratio: float = Field(gt=0, le=1)
    meta: dict[str, int] = {}
    pair: tuple[int, str]


class Counts(RootModel[list[conint(ge=0)]]):
    """A model whose JSON is not an object."""


INSTANCES = [
    Tree(v=1, kids=[Tree(v=2), Tree(v=3, kids=[Tree(v=4)])]),
    Counts([0, 7, 12]),
    Zoo(pets=[Cat(kind="cat", lives=3), Dog(kind="dog", name="Rex")], color=Color.green,
        when=datetime.date(2024, 2, 29),
        at=datetime.datetime(2024, 1, 1, 12, tzinfo=datetime.timezone.utc),
        price=decimal.Decimal("12.50"), id=uuid.UUID(int=5), ratio=0.5, meta={"a": 1},
        pair=(1, "x")),
]

POINT_DOCS = [
    '{"x":2,"y":"a"}', '{"x":12,"y":"b"}', '{"y":"a","x":-4}',  # valid
    '{"x":1,"y":"a"}', '{"x":21,"y":"b"}',  # schema-valid, odd: only pydantic rejects them
    '{"x":2,"y":"c"}', '{"x":2}', '{"x":2,"y":"a","z":1}', '{"x":"2","y":"a"}',
    '{"x":2.5,"y":"a"}', '[1]', 'null',
]
OUTER_DOCS = [
    '{"name":"n"}', '{"name":"n","inner":{"tags":["a","b"]},"score":1.5}',
    '{"name":"n","inner":null}', '{"name":"n","extra":[1,{}]}',
    '{"name":1}', '{"inner":{"tags":[]}}', '{"name":"n","inner":{"tags":[1]}}',
    '{"name":"n","score":"high"}',
]


def pydantic_accepts(model: type[BaseModel], doc: str) -> bool:
    try:
        model.model_validate_json(doc)
    except ValidationError:
        return False
    return True


def test_schema_is_the_models_validation_schema():
    assert JSONSchema(Point).schema == Point.model_json_schema()
    assert JSONSchema(Outer).model is Outer
    assert JSONSchema(Point.model_json_schema()).model is None
    assert repr(JSONSchema(Point)) == "JSONSchema(Point, whitespace='flexible')"


@pytest.mark.parametrize("model, docs", [(Point, POINT_DOCS), (Outer, OUTER_DOCS)])
async def test_complete_is_schema_and_pydantic(model, docs):
    """complete(x) = 0 iff the model's JSON Schema and pydantic itself both accept x."""
    pot = JSONSchema(model)
    plain = Draft202012Validator(model.model_json_schema())
    verdicts = []
    for doc in docs:
        want = plain.is_valid(json.loads(doc)) and pydantic_accepts(model, doc)
        got = await pot.complete(doc.encode())
        assert got == (0.0 if want else NEG_INF), doc
        verdicts.append(want)
    assert any(verdicts) and not all(verdicts)


async def test_pydantic_only_rule_is_checked_at_completion():
    """An odd x is a viable prefix (the schema cannot see the rule) but never a finished one."""
    # after the closing brace only EOS is left
    pot = JSONSchema(Point, whitespace="compact")
    plain = JSONSchema(Point.model_json_schema(), whitespace="compact")
    doc = b'{"x":1,"y":"a"}'
    assert await plain.complete(doc) == 0.0
    assert await pot.prefix(doc) == 0.0
    assert await pot.complete(doc) == NEG_INF
    nxt = await pot.logw_next(doc)
    assert nxt[-1] == NEG_INF and np.all(nxt[:-1] == NEG_INF)
    assert (await pot.logw_next(b'{"x":2,"y":"a"}'))[-1] == 0.0


def test_parse():
    p = JSONSchema(Point).parse('{"x":2,"y":"b"}')
    assert isinstance(p, Point) and (p.x, p.y) == (2, "b")
    o = JSONSchema(Outer).parse(b'{"name":"n","inner":{"tags":["t"]}}')
    assert isinstance(o.inner, Inner) and o.inner.tags == ["t"] and o.score == 0.0
    assert JSONSchema({"type": "array"}).parse("[1,[]]") == [1, []]
    with pytest.raises(ValidationError, match="x must be even"):
        JSONSchema(Point).parse('{"x":3,"y":"a"}')
    with pytest.raises(ValueError, match="document is incomplete"):
        JSONSchema(Point).parse('{"x":2,"y":"a"')
    with pytest.raises(ValueError, match="compact.*from byte 5 on"):
        JSONSchema(Point, whitespace="compact").parse('{"x": 2, "y": "a"}')
    assert JSONSchema(Point).parse('{"x": 2, "y": "a"}').x == 2  # flexible whitespace by default
    with pytest.raises(ValueError, match="from byte 11 on"):  # no such day: the closing quote
        JSONSchema({"type": "string", "format": "date"}).parse('"2023-02-29"')
    with pytest.raises(ValueError, match="from byte 7 on"):  # no month 13: the date's shape
        JSONSchema({"type": "string", "format": "date"}).parse('"2024-13-99"')
    with pytest.raises(ValueError, match="its last value is not valid under the schema: b'15'"):
        JSONSchema({"type": "integer", "maximum": 9}).parse("15")  # a number ends at the end


def test_bad_models_get_clear_errors():
    with pytest.raises(TypeError, match=r"pass the\s+class itself: JSONSchema\(Point\)"):
        JSONSchema(Point(x=2, y="a"))
    import pydantic.v1

    class Old(pydantic.v1.BaseModel):
        x: int

    with pytest.raises(TypeError, match="pydantic v1 model"):
        JSONSchema(Old)

    class NoSchema(BaseModel):
        f: Callable[[int], int]

    with pytest.raises(ValueError, match="cannot build a JSON Schema from the pydantic model NoS"):
        JSONSchema(NoSchema)
    with pytest.raises(TypeError, match="pydantic BaseModel subclass"):
        JSONSchema(int)


@pytest.mark.parametrize("inst", INSTANCES, ids=lambda m: type(m).__name__)
async def test_model_dump_round_trips_through_the_lifted_constraint(inst):
    """pydantic's own (compact) dump of an instance is forced token by token through the
    constraint lifted to a byte vocabulary: every token stays allowed, EOS is allowed at the
    end, and parse gives the instance back."""
    doc = inst.model_dump_json().encode()
    pot = JSONSchema(type(inst))
    lm = FastToyLM([bytes([b]) for b in range(256)] + [b"<eos>"], b"<eos>",
                   lambda ids: [1 / 257] * 257)
    lifted = pot.lift(lm)
    for i in range(len(doc)):
        assert (await lifted.logw_next(list(doc[:i])))[doc[i]] == 0.0, doc[: i + 1]
    assert (await lifted.logw_next(list(doc)))[256] == 0.0
    assert pot.parse(doc) == inst


async def test_model_bounds_and_patterns_reject():
    zoo = JSONSchema(Zoo)
    good = next(m for m in INSTANCES if isinstance(m, Zoo)).model_dump_json()
    for old, new in [('"lives":3', '"lives":10'), ('"Rex"', '"rex"'), ('"ratio":0.5', '"ratio":0'),
                     ('"green"', '"blue"'), ('"2024-02-29"', '"2023-02-29"'), ('"cat"', '"cow"')]:
        bad = good.replace(old, new)
        assert bad != good and not pydantic_accepts(Zoo, bad)
        assert await zoo.complete(bad.encode()) == NEG_INF, new


class TestPointContract(MaskKeyContract):
    symbols_per_context = 40

    def potential(self):
        return JSONSchema(Point)

    def contexts(self):
        return [b"", b"{", b'{"x":', b'{"x":1', b'{"x":1,', b'{"x":2,"y":"a"', b'{"x":1,"y":"a"}',
                b'{"x":2,"y":"a"}', b'{"y":', b'{"y":"b","x":2}', b'{"x":2,"y":"a"}x']


# ----------------------------------------------------------------------------- generation

# '1' is six times as likely as '2', so without pydantic's check most documents would be odd
VOCAB = [b'{"x":', b',"y":', b'"a"', b'"b"', b"}", b"1", b"2", b"<eos>"]
WEIGHTS = [3, 3, 3, 3, 3, 6, 1, 2]
MAX_TOKENS = 8


def toy_lm(weights: list[float] = WEIGHTS) -> FastToyLM:
    probs = [w / sum(weights) for w in weights]
    return FastToyLM(VOCAB, b"<eos>", lambda ids: probs)


def exact_z(pot: JSONSchema) -> float:
    """Z = sum over |x| <= MAX_TOKENS of p(x, EOS) phi(x), by depth-first search over viable
    token prefixes (the LM is context-free, so p(x) is a product of WEIGHTS)."""
    probs = [w / sum(WEIGHTS) for w in WEIGHTS]
    eos = len(VOCAB) - 1
    total, todo = 0.0, [((), b"", 1.0)]
    while todo:
        ids, text, p = todo.pop()
        if asyncio.run(pot.complete(text)) == 0.0:
            total += p * probs[eos]
        if len(ids) == MAX_TOKENS:
            continue
        for a in range(eos):
            longer = text + VOCAB[a]
            if asyncio.run(pot.prefix(longer)) == 0.0:
                todo.append((ids + (a,), longer, p * probs[a]))
    return total


def test_generate_parsed_gives_validated_model_instances():
    # about half the runs of this toy finish within MAX_TOKENS: the first of seeds 0-9 that does
    runs = (smc.generate("", JSONSchema(Point), lm=toy_lm(), particles=16, max_tokens=MAX_TOKENS, seed=seed)
            for seed in range(10))
    r = next((r for r in runs if r.finished), None)
    assert r is not None, "no particle finished in 10 runs"
    parsed = r.parsed
    assert len(parsed) == len(r.finished)
    for s, p in zip(r.finished, parsed):
        assert isinstance(p, Point)
        assert p == Point.model_validate_json(s.text) and p.x % 2 == 0
    best = r.parsed_best
    assert isinstance(best, Point) and best == Point.model_validate_json(r.best)


def test_generate_targets_the_model_not_just_its_schema():
    """Ẑ estimates the Z of schema AND pydantic (unbiased), far from the schema-only Z."""
    z_model = exact_z(JSONSchema(Point))
    z_plain = exact_z(JSONSchema(Point.model_json_schema()))
    assert 0 < z_model < 0.5 * z_plain
    n = 400
    r = smc.generate("", JSONSchema(Point), lm=toy_lm(), particles=n, max_tokens=MAX_TOKENS,
                     seed=0, sampler="direct", ess_threshold=0.0)
    w = np.array([math.exp(s.log_weight) if s.finished else 0.0 for s in r.samples])
    se = w.std() / math.sqrt(n)
    assert abs(math.exp(r.log_ml) - z_model) < 4 * se, (math.exp(r.log_ml), z_model, se)
    assert abs(math.exp(r.log_ml) - z_plain) > 8 * se
    assert all(p.x % 2 == 0 for p in r.parsed)


def test_parsed_needs_a_json_constraint():
    lm = toy_lm()
    r = smc.generate("", Regex(r'\{"x":2,"y":"a"\}'), lm=lm, particles=2, max_tokens=6, seed=0)
    with pytest.raises(ValueError, match=r"needs a run constrained by a JSONSchema.*Regex"):
        r.parsed
    with pytest.raises(ValueError, match="this run had no constraint"):
        smc.generate("", None, lm=lm, particles=2, max_tokens=2, seed=0).parsed
    both = JSONSchema(Point) * JSONSchema(Outer)
    r = smc.generate("", both, lm=lm, particles=2, max_tokens=2, seed=0)
    with pytest.raises(ValueError, match=r"several pydantic models \(Point, Outer\)"):
        r.parsed


def test_parsed_finds_the_schema_in_products_and_lifted_constraints():
    lm = toy_lm([1] * len(VOCAB))
    even = Regex(r'\{"x":[12]*2,"y":"[ab]"\}')  # Point's rule, enforced while generating
    for constraint in (JSONSchema(Point) * even, JSONSchema(Point).lift(lm)):
        r = smc.generate("", constraint, lm=lm, particles=16, max_tokens=16, seed=0)
        assert r.finished
        assert all(isinstance(p, Point) for p in r.parsed)
    r = smc.generate("", JSONSchema(Point.model_json_schema()), lm=lm, particles=16,
                     max_tokens=16, seed=0)
    assert r.finished and all(isinstance(v, dict) and set(v) == {"x", "y"} for v in r.parsed)


def test_no_finished_sample_parses_to_empty():
    never = JSONSchema(Point) * Regex(r"\[")  # nothing is both
    r = smc.generate("", never, lm=toy_lm(), particles=4, max_tokens=4, seed=0)
    assert r.parsed == [] and r.parsed_best is None and r.log_ml == NEG_INF
