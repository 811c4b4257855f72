"""Products: log weights add, byte products stay byte potentials, vocabularies must agree."""

from __future__ import annotations

import numpy as np
import pytest
from potentials.testing import MaskKeyContract, PlainTextBudgetContract, PotentialContract
from tests.potentials.test_lift import TOY_CONTEXTS, Weighted, brute_force, toy_lm

from smc.core.logmath import NEG_INF
from potentials.base import BytePotential
from potentials.json import JSONSchema
from potentials.predicate import Predicate
from potentials.base import ByteProduct, Product
from potentials.regex import Regex

CONTEXTS = [b"", b"a", b"ab", b"aba", b"abab", b"b", b"ac", b"\xc3", b"\xc3\xa9", b"\xff"]


def pair() -> tuple[BytePotential, BytePotential]:
    return Regex(r"(ab|é)+a?"), Predicate(complete=lambda t: len(t) % 2 == 0,
                                           prefix=lambda t: "ba" not in t[2:])


class TestByteProductContract(PotentialContract):
    def potential(self):
        a, b = pair()
        return a * b

    def contexts(self):
        return CONTEXTS


class TestWeightedByteProductContract(PotentialContract):
    def potential(self):
        return Regex(r"[ab]*c?|é") * Weighted()

    def contexts(self):
        return CONTEXTS


class TestJSONStringProductContract(MaskKeyContract, PlainTextBudgetContract):
    """Both factors give plain-text budgets and mask keys; the product combines them."""

    def potential(self):
        return JSONSchema({"type": "string", "maxLength": 6}) * JSONSchema({"maxLength": 3})

    def contexts(self):
        text = '"ab\\u00e9"'.encode()
        return [text[:i] for i in range(len(text) + 1)] + [b'"x', b'"xy']


def test_product_budget_is_the_smaller_one():
    pot = JSONSchema({"type": "string", "maxLength": 6}) * JSONSchema({"maxLength": 3})
    assert pot.plain_text_budget(pot.state_of(b'"a')) == 2
    assert pot.mask_key(pot.state_of(b'"a')) == pot.mask_key(pot.state_of(b'"b'))
    mixed = Regex('"[a-z]*"') * JSONSchema({"type": "string"})
    assert mixed.plain_text_budget(mixed.state_of(b'"a')) is None  # a regex gives no budget


class TestTokenProductContract(PotentialContract):
    def potential(self):
        lm = toy_lm()
        return Regex(r"(ab|é)+a?").lift(lm) * Weighted().lift(lm)

    def contexts(self):
        return TOY_CONTEXTS


async def test_log_weights_add():
    a, b = pair()
    prod = a * b
    assert isinstance(prod, ByteProduct)
    for ctx in CONTEXTS:
        assert await prod.prefix(ctx) == await a.prefix(ctx) + await b.prefix(ctx)
        assert await prod.complete(ctx) == await a.complete(ctx) + await b.complete(ctx)
        np.testing.assert_array_equal(await prod.logw_next(ctx),
                                      await a.logw_next(ctx) + await b.logw_next(ctx))
    w = Regex(r"a*") * Weighted()
    assert not w.boolean
    assert await w.prefix(b"aa") == -1.0 and await w.complete(b"aa") == -1.25


async def test_lifted_byte_product_equals_product_of_lifts():
    lm = toy_lm()
    byte_prod = Regex(r"(ab|é)+a?") * Weighted()
    lifted = byte_prod.lift(lm)
    token_prod = Regex(r"(ab|é)+a?").lift(lm) * Weighted().lift(lm)
    assert isinstance(token_prod, Product)
    for ctx in TOY_CONTEXTS:
        got = await lifted.logw_next(ctx)
        np.testing.assert_allclose(got, await token_prod.logw_next(ctx))
        if not any(t in (6, 7, 8) for t in ctx):
            ctx_bytes = b"".join(lm.vocab[t] for t in ctx)
            want = await brute_force(byte_prod, lm.vocab, {6}, {8}, ctx_bytes)
            np.testing.assert_allclose(got, want)
        sub = [0, 2, 5, 6, 11]
        np.testing.assert_allclose(await token_prod.logw_subset(ctx, sub), got[sub])


async def test_three_factors_and_dead_start():
    prod = Regex(r"a+") * Regex(r"[ab]{2}") * Predicate(complete=lambda t: True)
    assert await prod.complete(b"aa") == 0.0 and await prod.complete(b"a") == NEG_INF
    assert await prod.prefix(b"ab") == NEG_INF
    empty = Regex(r"a") * Regex(r"b")
    assert await empty.prefix(b"") == 0.0  # each factor alone is satisfiable at the start
    assert await empty.prefix(b"a") == NEG_INF and await empty.prefix(b"b") == NEG_INF
    assert await (Regex(r"[^\s\S]") * Regex("a")).prefix(b"") == NEG_INF


def test_mismatched_vocabularies_are_refused():
    lm = toy_lm()
    with pytest.raises(ValueError, match=r"different vocabularies.*lift"):
        Regex("a") * Regex("a").lift(lm)
    with pytest.raises(TypeError, match="cannot multiply"):
        Regex("a") * 3  # type: ignore[operator]
    with pytest.raises(TypeError, match="cannot multiply"):
        Regex("a").lift(lm) * 3  # type: ignore[operator]


def test_factors_are_the_leaves_in_order():
    lm = toy_lm()
    a, b, c = Regex(r"a+"), Predicate(complete=lambda t: True), Weighted()
    assert a.factors() == (a,)
    byte_prod = (a * b) * c
    assert isinstance(byte_prod, ByteProduct) and byte_prod.factors() == (a, b, c)
    lifted = byte_prod.lift(lm)
    assert lifted.potential is byte_prod and lifted.factors() == (a, b, c)
    token_prod = a.lift(lm) * (b * c).lift(lm)
    assert isinstance(token_prod, Product) and token_prod.factors() == (a, b, c)
