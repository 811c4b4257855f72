"""Lifting byte potentials to token vocabularies: contract, brute force, incremental cost."""

from __future__ import annotations

import numpy as np
import pytest
from potentials.testing import PotentialContract

from smc.core.logmath import NEG_INF
from potentials.base import BytePotential
from potentials.lift import Lifted
from potentials.vocab import VocabTrie
from potentials.json import JSONSchema
from potentials.regex import Regex
from smc.backends.toy import ToyLM

TOY_VOCAB = [b"a", b"b", b"ab", b"\xc3", b"\xa9", "é".encode(), b"<eos>", b"", b"<ctl>", b"c\xc3",
             b"\xa9a", b"ba"]
EOS, EMPTY, CTL = 6, 7, 8


def toy_lm() -> ToyLM:
    lm = ToyLM(TOY_VOCAB, b"<eos>", lambda ids: [1 / len(TOY_VOCAB)] * len(TOY_VOCAB))
    lm.special_token_ids = frozenset({CTL})
    return lm


class Weighted(BytePotential):
    """Soft test potential: log weight -0.5 per 'a' (prefix and complete), dead after 'c'."""

    boolean = False

    def initial(self):
        return 0

    def advance(self, state, data):
        if b"c" in data:
            return None
        return state + data.count(b"a")

    async def state_prefix(self, state):
        return -0.5 * state

    async def state_complete(self, state):
        return -0.5 * state - 0.25


class Counting(BytePotential):
    """Regex wrapper that counts the bytes it is asked to advance over."""

    def __init__(self, inner: BytePotential):
        self.inner, self.bytes_advanced = inner, 0

    def initial(self):
        return self.inner.initial()

    def advance(self, state, data):
        self.bytes_advanced += len(data)
        return self.inner.advance(state, data)

    async def state_prefix(self, state):
        return await self.inner.state_prefix(state)

    async def state_complete(self, state):
        return await self.inner.state_complete(state)


TOY_CONTEXTS = [(), (0,), (3,), (3, 4), (3, 0), (5, 1), (9,), (9, 4), (EOS,), (CTL,), (EMPTY,),
                (0, 2, 11)]


class TestLiftedRegexContract(PotentialContract):
    def potential(self):
        return Regex(r"(ab|é)+a?").lift(toy_lm())

    def contexts(self):
        return TOY_CONTEXTS


class TestLiftedWeightedContract(PotentialContract):
    def potential(self):
        return Weighted().lift(toy_lm())

    def contexts(self):
        return TOY_CONTEXTS


async def brute_force(pot: BytePotential, vocab, eos_ids, blocked, ctx_bytes: bytes) -> np.ndarray:
    base = await pot.prefix(ctx_bytes)
    out = np.full(len(vocab), NEG_INF)
    if base == NEG_INF:
        return out
    for t, tok in enumerate(vocab):
        if t in eos_ids:
            out[t] = await pot.complete(ctx_bytes) - base
        elif t not in blocked and tok:
            out[t] = await pot.prefix(ctx_bytes + tok) - base
    return out


@pytest.mark.parametrize("byte_pot", [Regex(r"(ab|é)+a?"), Regex(r"[^a]*"), Weighted()])
async def test_toy_lift_agrees_with_brute_force(byte_pot):
    lm = toy_lm()
    lifted = byte_pot.lift(lm)
    for ctx in TOY_CONTEXTS:
        ctx_bytes = b"".join(TOY_VOCAB[t] for t in ctx)
        bad = any(t in (EOS, EMPTY, CTL) for t in ctx)
        want = (np.full(len(TOY_VOCAB), NEG_INF) if bad else
                await brute_force(byte_pot, TOY_VOCAB, {EOS}, {CTL}, ctx_bytes))
        got = await lifted.logw_next(ctx)
        np.testing.assert_allclose(got, want)
        if not bad:
            assert await lifted.prefix(ctx) == await byte_pot.prefix(ctx_bytes)
            assert await lifted.complete(ctx) == await byte_pot.complete(ctx_bytes)


async def test_special_and_empty_tokens_get_zero_weight():
    lifted = Regex(r"(?s).*").lift(toy_lm())
    logw = await lifted.logw_next(())
    assert logw[CTL] == NEG_INF and logw[EMPTY] == NEG_INF
    assert logw[EOS] == 0.0 and logw[0] == 0.0
    assert await lifted.prefix((CTL,)) == NEG_INF
    assert await lifted.prefix((EOS, 0)) == NEG_INF


async def test_multibyte_character_split_across_tokens():
    lifted = Regex(r"é+").lift(toy_lm())
    assert await lifted.prefix((3,)) == 0.0          # first byte of é
    assert await lifted.complete((3,)) == NEG_INF
    assert await lifted.complete((3, 4)) == 0.0      # é as two tokens
    assert await lifted.complete((3, 4, 5)) == 0.0   # é é
    assert await lifted.prefix((3, 3)) == NEG_INF    # invalid UTF-8
    logw = await lifted.logw_next((3,))
    assert [t for t in range(len(TOY_VOCAB)) if logw[t] == 0.0] == [4, 10][:1]


async def test_checking_a_token_costs_its_bytes_not_the_prefix():
    counting = Counting(Regex(r"(ab)*"))
    lifted = Lifted(counting, toy_lm())
    ctx: tuple[int, ...] = ()
    for _ in range(300):
        assert await lifted.prefix(ctx) == 0.0
        ctx += (2,)
    await lifted.prefix(ctx)
    before = counting.bytes_advanced
    await lifted.logw_subset(ctx, [0, 2, 11])
    assert counting.bytes_advanced - before == 1 + 2 + 2
    before = counting.bytes_advanced
    assert await lifted.prefix(ctx + (2,)) == 0.0
    assert counting.bytes_advanced - before == 2
    assert lifted.stats["tokens_checked"] == 3


async def test_state_cache_eviction_never_changes_results():
    small = Regex(r"(ab|é)+a?").lift(toy_lm())
    small._cache_size = 2
    big = Regex(r"(ab|é)+a?").lift(toy_lm())
    for ctx in TOY_CONTEXTS * 2:
        np.testing.assert_array_equal(await small.logw_next(ctx), await big.logw_next(ctx))
    assert len(small._states) <= 2


async def test_bad_arguments():
    with pytest.raises(TypeError, match="BytePotential"):
        Lifted(Regex("a").lift(toy_lm()), toy_lm())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not in the vocabulary"):
        await Regex("a").lift(toy_lm()).prefix((99,))


def test_trie_holds_every_token_once():
    trie = VocabTrie(TOY_VOCAB, {EOS, EMPTY, CTL})
    found = {}
    stack = [(0, b"")]
    while stack:
        node, path = stack.pop()
        path += trie.label[node]
        for t in trie.tokens[node]:
            found[t] = path
        stack += [(c, path) for c in trie.children[node]]
    assert found == {t: v for t, v in enumerate(TOY_VOCAB) if t not in (EOS, EMPTY, CTL)}


def test_char_trie_spells_every_plain_token_level_by_level():
    from potentials.lift_text import CharTrie

    vocab = [b"a", b"ab", "日本".encode(), "日".encode(), b"b", b"abc", b"x y"]
    trie = CharTrie(vocab, [0, 1, 2, 3, 5, 6])
    depth = np.zeros(len(trie.parent), dtype=int)
    for d, (lo, hi) in enumerate(zip(trie.levels, trie.levels[1:]), start=1):
        assert np.all(trie.parent[lo:hi] < lo)  # parents come from shallower levels
        depth[lo:hi] = d
    assert trie.levels[-1] == len(trie.parent)
    for t, node in zip(trie.ids.tolist(), trie.end.tolist()):
        text = ""
        while node:
            text = chr(trie.cps[trie.cp[node]]) + text
            node = int(trie.parent[node])
        assert text == vocab[t].decode()
    assert sorted(trie.ids.tolist()) == [0, 1, 2, 3, 5, 6] and depth.max() == 3
    # each node's children are the contiguous range first .. first + n_kids
    for node in range(len(trie.parent)):
        kids = [k for k in range(1, len(trie.parent)) if trie.parent[k] == node]
        assert kids == list(range(trie.first[node], trie.first[node] + trie.n_kids[node]))


def _partial_char_tokens(vocab: list[bytes], k: int) -> list[int]:
    """Tokens whose bytes end inside a multi-byte character."""
    out = []
    for t, tok in enumerate(vocab):
        try:
            tok.decode()
        except UnicodeDecodeError as e:
            if e.reason == "unexpected end of data" and e.start > 0:
                out.append(t)
        if len(out) == k:
            break
    return out


@pytest.mark.slow
async def test_embedded_vocabulary_agrees_with_brute_force(embedded_lm):
    lm = embedded_lm
    vocab = lm.vocab
    eos, special = set(lm.eos_token_ids), set(lm.special_token_ids)
    ids = lm.encode("Le café coûte 3€")
    partial = _partial_char_tokens(vocab, 2)
    for pattern in [r"[A-Za-z é€ûô0-9]+", r"(?s).{0,40}", r"Le caf(é|e) [a-zû]+ \d€?"]:
        byte_pot = Regex(pattern)
        lifted = byte_pot.lift(lm)
        contexts = [(), tuple(ids[:3]), tuple(ids), *((t,) for t in partial),
                    (ids[0], partial[1])]
        for ctx in contexts:
            ctx_bytes = b"".join(vocab[t] for t in ctx)
            want = await brute_force(byte_pot, vocab, eos, special, ctx_bytes)
            got = await lifted.logw_next(ctx)
            np.testing.assert_array_equal(got, want, err_msg=f"{pattern} {ctx_bytes!r}")
            sub = list(range(0, len(vocab), 97)) + list(eos)
            np.testing.assert_array_equal(await lifted.logw_subset(ctx, sub), want[sub])


async def test_regex_masks_are_shared_per_dfa_state():
    lifted = Regex(r"(ab)*").lift(toy_lm())
    first = await lifted.logw_next((2,))
    again = await lifted.logw_next((2, 2))  # same DFA state after "ab" and "abab"
    np.testing.assert_array_equal(first, again)
    assert lifted.stats["mask_cache_hits"] == 1
    want = await brute_force(Regex(r"(ab)*"), TOY_VOCAB, {EOS}, {CTL}, b"abab")
    np.testing.assert_array_equal(again, want)


async def test_mask_would_be_kept_until_the_state_mask_is_cached():
    """True at a live context of a Boolean potential whose key has no mask yet; False once any
    context with that key was evaluated, at dead contexts, and for graded potentials."""
    lifted = Regex(r"(ab)*").lift(toy_lm())
    assert await lifted.mask_would_be_kept((2,))
    assert await lifted.mask_would_be_kept((2, 2))  # same DFA state, nothing cached yet
    await lifted.logw_next((2,))
    assert not await lifted.mask_would_be_kept((2, 2))
    assert not await lifted.mask_would_be_kept((1,))  # "b": dead
    assert not await Weighted().lift(toy_lm()).mask_would_be_kept(())


async def test_build_tables_leaves_no_table_for_masks_to_build():
    """After ``build_tables``, a regex's masks and its finishing walk build no per-LM table."""
    lifted = Regex(r"(ab)*c?").lift(toy_lm())
    lifted.build_tables()
    built = set(lifted._tables)
    assert len(built) == 4
    await lifted.logw_next(())
    await lifted.logw_next((2,))
    await lifted.last_step_mask((2,))
    assert set(lifted._tables) == built


async def test_a_checked_token_state_is_kept_for_the_next_step():
    """A one-token check computes the token's byte state once: the next step's context reads it
    from the cache (no second advance over the token's bytes)."""
    pot = Counting(Regex(r"(ab)*"))
    lifted = pot.lift(toy_lm())
    assert (await lifted.logw_subset((), [2]))[0] == 0.0
    advanced = pot.bytes_advanced
    assert await lifted.prefix((2,)) == 0.0
    assert pot.bytes_advanced == advanced
    assert lifted.stats["state_cache_misses"] == 1  # the empty context only


@pytest.mark.slow
async def test_embedded_vocabulary_json_masks_agree_with_brute_force(embedded_lm):
    """JSON string states take the plain-text shortcut (budget), others the full walk."""
    lm = embedded_lm
    eos, special = set(lm.eos_token_ids), set(lm.special_token_ids)
    schema = {"type": "object",
              "properties": {"name": {"type": "string", "maxLength": 5},
                             "tag": {"type": "string", "pattern": "^[a-z]+$"}}}
    byte_pot = JSONSchema(schema, whitespace="flexible")
    lifted = byte_pot.lift(lm)
    for text in ['{"name": "', '{"name": "Zoë', '{"name": "abcd', '{"tag": "ab', '{"', "{",
                 '{"name":', '{"name": "ab",', '{"tag": "ab"']:
        ctx = tuple(lm.encode(text))
        ctx_bytes = b"".join(lm.vocab[t] for t in ctx)
        assert ctx_bytes == text.encode()
        want = await brute_force(byte_pot, lm.vocab, eos, special, ctx_bytes)
        got = await lifted.logw_next(ctx)
        np.testing.assert_array_equal(got, want, err_msg=text)
    # the name's string states took the shortcut: tokens longer than the room left are dead
    assert byte_pot.plain_text_budget(byte_pot.state_of(b'{"name": "abcd')) == 1
    # a string that may be an enum value, a pattern's or free text: the union of three masks
    byte_pot = JSONSchema({"anyOf": [{"enum": ["red", "green"]}, {"type": "string", "pattern": "^g"},
                                     {"type": "string", "maxLength": 4}]})
    lifted = byte_pot.lift(lm)
    for text in ['"', '"gr']:
        ctx = tuple(lm.encode(text))
        assert byte_pot.alternatives(byte_pot.state_of(text.encode())) is not None
        want = await brute_force(byte_pot, lm.vocab, eos, special, text.encode())
        np.testing.assert_array_equal(await lifted.logw_next(ctx), want, err_msg=text)


# every single byte, a space before each of 20 characters (a node with many children) and
# some JSON tokens, so that next_bytes narrows the root and the space node
FANOUT_VOCAB = ([bytes((b,)) for b in range(256)] + [b" " + bytes((c,)) for c in b'abcdefgh{}[]",:0123']
                + [b'{"', b'":', b'",', b'"}', b"true", b"tr", b"12", b"1,", b"\\u00e9", b"\xc3\xa9"])


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "yz"]}}},
    {"type": "array", "items": {"type": ["boolean", "string", "number"]}},
])
async def test_next_bytes_narrow_the_walk_without_changing_masks(schema):
    """Lifted descends big trie nodes only through next_bytes: the masks equal the brute
    force and those of a walk that tries every child, with fewer trie nodes visited."""
    vocab = FANOUT_VOCAB + [b"<eos>"]
    eos = len(vocab) - 1
    lm = ToyLM(vocab, b"<eos>", lambda ids: [1 / len(vocab)] * len(vocab))
    narrow = JSONSchema(schema, whitespace="flexible")
    every = JSONSchema(schema, whitespace="flexible")
    every.next_bytes = lambda state: None
    a, b = narrow.lift(lm), every.lift(lm)
    texts = ["", "{", '{"a":', '{"a": 1', '{"a": 12,', '{"b": "', '{"b": "y', "[", "[tr", '[1, "\\u0',
             "[1.5e"]
    for text in texts:
        data = text.encode()
        if await narrow.prefix(data) == NEG_INF:
            continue
        ctx = tuple(vocab.index(bytes((c,))) for c in data)
        want = await brute_force(narrow, vocab, {eos}, set(), data)
        np.testing.assert_array_equal(await a.logw_next(ctx), want, err_msg=text)
        np.testing.assert_array_equal(await b.logw_next(ctx), want, err_msg=text)
    assert a.stats["trie_nodes_visited"] < b.stats["trie_nodes_visited"] / 2


JSON_TOY_VOCAB = [b"[", b"]", b'"', b",", b"a", b"b", b"ab", b"/", b"a/", b"aaaa", b'"]', b'",', b"bb/b",
                  b"\xc3", b"\xa9", "é".encode(), b"<eos>", b"\\n", b'a"', b" "]


async def test_pattern_string_masks_reuse_the_plain_mask_per_automaton_state():
    """Inside a string with a pattern, the plain tokens' mask is computed once per automaton
    state (plain_text_key) and cut to the room left by maxLength; every mask still equals the
    brute force, also when a later string of the same clause starts with more room."""
    eos = JSON_TOY_VOCAB.index(b"<eos>")
    lm = ToyLM(JSON_TOY_VOCAB, b"<eos>", lambda ids: [1 / len(JSON_TOY_VOCAB)] * len(JSON_TOY_VOCAB))
    schema = {"type": "array", "items": {"type": "string", "pattern": "^[ab]+/?[ab]*$", "maxLength": 6}}
    byte_pot = JSONSchema(schema)
    lifted = byte_pot.lift(lm)
    texts = ['["', '["a', '["ab', '["aba', '["ab/', '["ab/b', '["ab/bb', '["abab/b', '["a/","',
             '["a/","a', '["a/","b', '["a/","ab']
    keys = set()
    for text in texts:
        ctx_bytes = text.encode()
        state = byte_pot.state_of(ctx_bytes)
        assert byte_pot.plain_text_budget(state) is None  # the pattern: no plain budget
        split = byte_pot.plain_text_key(state)
        assert split is not None and split[1] == 6 - len(text.rsplit('"', 1)[1])
        keys.add(split[0])
        ctx = tuple(lm.encode(text))
        want = await brute_force(byte_pot, JSON_TOY_VOCAB, {eos}, set(), ctx_bytes)
        np.testing.assert_array_equal(await lifted.logw_next(ctx), want, err_msg=text)
    # one plain mask per automaton state, shared by the strings' positions
    assert len(keys) <= 5 < len(texts) and len(lifted.text_masks.plain_masks) == len(keys)
    assert byte_pot.plain_text_key(byte_pot.state_of(b"[")) is None  # not inside a string


INNER_TOY_VOCAB = JSON_TOY_VOCAB[:-1] + [b"{", b"}", b":", b'"k', b"k", b"\\", b"\\u00e", b"9", b"\n", b"\xc3\xa9\xc3",
                                         b'\\"', b'"}', b'a":', b"\xe6\x97", b"\xa5"]


@pytest.mark.parametrize("schema", [
    {"type": "array", "items": {"type": "string"}},
    {"type": "array", "items": {"type": "string", "maxLength": 3, "minLength": 2}},
    {"type": "array", "items": {"type": "string", "pattern": "^[aé]+$"}, "uniqueItems": True},
    {"type": "object", "additionalProperties": {"type": "string", "pattern": "a"}},
])
async def test_string_masks_reuse_the_inner_tokens_per_key(schema):
    """Inside strings, the non-plain tokens without a quote (partial characters, escapes,
    control bytes) are walked once per inner_text_key; every mask equals the brute force."""
    vocab = INNER_TOY_VOCAB
    eos = vocab.index(b"<eos>")
    lm = ToyLM(vocab, b"<eos>", lambda ids: [1 / len(vocab)] * len(vocab))
    byte_pot = JSONSchema(schema)
    lifted = byte_pot.lift(lm)
    opener = '{"' if schema["type"] == "object" else '["'
    texts = [opener, opener + "a", opener + "aa", opener + "\\u00e9", opener + "é", opener + "aaa",
             opener + 'a","', opener + 'a","a', opener + 'a","é']
    if schema["type"] == "object":
        texts = ['{"', '{"k', '{"k":"', '{"k":"a', '{"k":"aé', '{"k":"a","', '{"k":"a","k":"', '{"k":"a","k":"a']
    keyed = 0
    for text in texts:
        ctx_bytes = text.encode()
        state = byte_pot.state_of(ctx_bytes)
        if state is None:
            continue
        keyed += byte_pot.inner_text_key(state) is not None
        want = await brute_force(byte_pot, vocab, {eos}, set(), ctx_bytes)
        ctx = tuple(lm.encode(text))
        assert b"".join(vocab[t] for t in ctx) == ctx_bytes
        np.testing.assert_array_equal(await lifted.logw_next(ctx), want, err_msg=text)
        lifted._masks.clear()  # every mask computed afresh: the inner cache is what is shared
        np.testing.assert_array_equal(await lifted.logw_next(ctx), want, err_msg=text)
    assert keyed >= 4 and 0 < len(lifted.text_masks.inner) < keyed


async def test_string_walks_are_shared_by_json_potentials_of_one_lm():
    """JSONSchema shares_text_keys: the inner and plain walks of its string states are kept
    per LM, so a second schema's strings reuse the first one's; every mask still equals the
    brute force, also where the keys differ (a pattern, a maxLength)."""
    vocab = INNER_TOY_VOCAB
    eos = vocab.index(b"<eos>")
    lm = ToyLM(vocab, b"<eos>", lambda ids: [1 / len(vocab)] * len(vocab))
    schemas = [{"type": "array", "items": {"type": "string"}},
               {"type": "object", "additionalProperties": {"type": "string"}},
               {"type": "array", "items": {"type": "string", "maxLength": 2}},
               {"type": "array", "items": {"type": "string", "pattern": "^a*$"}}]
    lifted = [JSONSchema(s).lift(lm) for s in schemas]
    first, last = lifted[0].text_masks, lifted[3].text_masks
    assert first.inner is last.inner and first.plain_masks is last.plain_masks
    texts = [['["', '["a', '["aé'], ['{"k":"', '{"k":"a'], ['["', '["a', '["aa'], ['["', '["a']]
    sizes = []
    for lift, group in zip(lifted, texts):
        for text in group:
            ctx = tuple(lm.encode(text))
            want = await brute_force(lift.potential, vocab, {eos}, set(), text.encode())
            np.testing.assert_array_equal(await lift.logw_next(ctx), want, err_msg=text)
        sizes.append(len(lift.text_masks.inner))
    assert sizes[1] == sizes[0]  # the object's string values: the array's walks, reused
    assert sizes[2] > sizes[1] and sizes[3] > sizes[2]  # new rooms, then a pattern automaton


class _ByteWalkOnly:
    """An automaton that offers only ``walk`` (no ``char_table``)."""

    def __init__(self, dfa):
        self.walk = dfa.walk


@pytest.mark.parametrize("items", [
    {"type": "string", "pattern": "^[ab]+/?[ab]*$"},
    {"anyOf": [{"type": "string", "pattern": "^a+$"}, {"type": "string", "pattern": "^b/"}]},
    {"allOf": [{"type": "string", "pattern": "a"}, {"type": "string", "pattern": "^[^/]*$"}]},
    {"type": "string", "pattern": "^[abé日]+$", "maxLength": 2},
])
async def test_pattern_strings_char_tables_agree_with_the_byte_walk(items):
    """L_k of the plain tokens from the automata's char tables (alternatives or'ed, the
    automata of one alternative and'ed), and of the raw tokens (cut inside a character) from
    the automata's byte walk within the room left, equal the byte-trie walk and the brute
    force."""
    vocab = JSON_TOY_VOCAB + [b"ba", "日本".encode(), b"a\xc3\xa9b", b"//", "日".encode()[:2],
                              b"a\xc3", b"\xe6\x97", b"\xa5"]
    eos = vocab.index(b"<eos>")
    lm = ToyLM(vocab, b"<eos>", lambda ids: [1 / len(vocab)] * len(vocab))
    schema = {"type": "array", "items": items}
    fast, slow = JSONSchema(schema), JSONSchema(schema)
    slow.shares_text_keys = False  # its own caches: nothing computed by the fast one
    slow.plain_text_automata = lambda key: [[(_ByteWalkOnly(d), q) for d, q in alt]
                                            for alt in JSONSchema.plain_text_automata(slow, key)]
    texts = ['["', '["a', '["ab', '["b', '["b/', '["a/"', '["aé', '["日']
    keyed = await _masks_match_brute_force([fast.lift(lm), slow.lift(lm)], texts, vocab, eos,
                                           fast.plain_text_key)
    assert keyed >= 2


async def _masks_match_brute_force(lifts, texts, vocab, eos, counted) -> int:
    """Every lifted potential's mask after each live text equals the brute force (over its
    byte potential); returns how many of those texts' states ``counted`` answers for."""
    byte_pot, lm = lifts[0].potential, lifts[0].lm
    seen = 0
    for text in texts:
        state = byte_pot.state_of(text.encode())
        if state is None:
            continue
        seen += counted(state) is not None
        ctx = tuple(lm.encode(text))
        want = await brute_force(byte_pot, vocab, {eos}, set(), text.encode())
        for lift in lifts:
            np.testing.assert_array_equal(await lift.logw_next(ctx), want, err_msg=text)
    return seen


async def test_string_alternatives_masks_are_the_union():
    """A string state with several configurations (enum literals, a pattern, free text up to
    a length) is masked as the union of one mask per configuration: equal to the brute force."""
    vocab = JSON_TOY_VOCAB + [b"r", b"g", b"gr", b"re", b"een", b"ed", b"d", b"e"]
    eos = vocab.index(b"<eos>")
    lm = ToyLM(vocab, b"<eos>", lambda ids: [1 / len(vocab)] * len(vocab))
    byte_pot = JSONSchema({"type": "array", "items": {"anyOf": [
        {"enum": ["red", "green"]}, {"type": "string", "pattern": "^g"},
        {"type": "string", "maxLength": 3}]}})
    texts = ['["', '["g', '["gr', '["gre', '["r', '["re', '["red', '["red","', '["a']
    split = await _masks_match_brute_force([byte_pot.lift(lm)], texts, vocab, eos,
                                           byte_pot.alternatives)
    assert split >= 5


async def test_string_alternatives_inside_a_checked_array_reuse_their_inner_masks():
    """Inside a container checked when it closes (uniqueItems), the state's mask key holds the
    text; the tokens without a quote are still masked per configuration's inner key, so a
    second text reaching the same string configurations reuses them, and the tokens with a
    quote (which may close the array and read its text) are walked per state: every mask
    equals the brute force, duplicates included."""
    vocab = JSON_TOY_VOCAB + [b"r", b"g", b"gr", b"re", b"een", b"ed", b"d", b"e", b'"r',
                              b'","', b'"]', b'","r']
    eos = vocab.index(b"<eos>")
    lm = ToyLM(vocab, b"<eos>", lambda ids: [1 / len(vocab)] * len(vocab))
    byte_pot = JSONSchema({"type": "array", "uniqueItems": True, "items": {"anyOf": [
        {"enum": ["red", "green"]}, {"type": "string", "maxLength": 3}]}})
    lifted = byte_pot.lift(lm)
    texts = ['["r', '["re', '["red', '["red","r', '["red","re', '["red","red', '["ab","r',
             '["ab","re', '["ab","red', '["gr', '["ab","gr']
    split = await _masks_match_brute_force([lifted], texts, vocab, eos, byte_pot.alternatives)
    assert split == len(texts)
    # '["re' and '["ab","re' (and the others after one item) have equal inner keys
    keys = {byte_pot.inner_text_key(byte_pot.state_of(t.encode()))[0] for t in texts}
    assert len(keys) < len(texts)
    assert len(lifted.text_masks.nonstop) == len({k for t in texts
                                        for p in byte_pot.alternatives(byte_pot.state_of(t.encode()))
                                        for k in [byte_pot.inner_text_key(p)[0]]})


async def test_escape_states_mask_their_inner_tokens_per_key():
    """Inside an escape (one configuration, no plain-text shortcut) the tokens without a quote
    are masked per inner key, the escape's own (shared by every string at that point), and
    the tokens with one walked per state: the masks equal the brute force."""
    vocab = JSON_TOY_VOCAB + [b"\\", b"n", b"u", b"00", b"e9", b"\\u", b'\\"', b'"x', b"nx", b'n"]']
    eos = vocab.index(b"<eos>")
    lm = ToyLM(vocab, b"<eos>", lambda ids: [1 / len(vocab)] * len(vocab))
    byte_pot = JSONSchema({"type": "array", "items": {"type": "string", "maxLength": 4}})
    lifted = byte_pot.lift(lm)
    texts = ['["a\\', '["\\', '["ab","\\', '["\\u', '["\\u00', '["a\\"', '["ab\\']
    await _masks_match_brute_force([lifted], texts, vocab, eos, byte_pot.alternatives)
    keys = {byte_pot.inner_text_key(byte_pot.state_of(t.encode()))[0] for t in texts[:3]}
    assert len(keys) == 2 and len(lifted.text_masks.nonstop) >= 2  # '["a\\' and '["ab","\\' share one


def test_per_lm_byte_tables_match_the_tokens():
    from potentials.vocab import last_bytes, stop_tokens

    vocab = [b"a", b'"b', b"", b'x"}', "é".encode(), b"\\n", b"<eos>", b"}"]
    lm = ToyLM(vocab, b"<eos>", lambda ids: [1 / len(vocab)] * len(vocab))
    assert last_bytes(lm).tolist() == [t[-1] if t else -1 for t in vocab]
    for stop in (b'"', b'"}', b"\xa9"):
        assert stop_tokens(lm, stop).tolist() == [any(b in stop for b in t) for t in vocab]


@pytest.mark.parametrize("sparse_share", [0, 2, 10**9], ids=["live-only", "mixed", "whole-levels"])
@pytest.mark.parametrize("deep_level", [0, 2, 10**9], ids=["all-arrays", "mixed", "all-nodes"])
def test_char_table_walk_is_the_same_whether_levels_are_arrays_or_nodes(monkeypatch, deep_level,
                                                                         sparse_share):
    """The character-table walk steps shallow levels as arrays (below the live nodes only, or
    whole) and the sparse deep levels node by node (``CharTrie.deep``); wherever the cuts
    fall, L_k is the byte walk's."""
    import potentials.lift_text as lift_module
    from potentials.regex.automaton import compile_regex

    monkeypatch.setattr(lift_module, "DEEP_LEVEL", deep_level)
    monkeypatch.setattr(lift_module, "SPARSE_SHARE", sparse_share)
    vocab = [b"a", b"ab", b"abc", b"abcd", b"abcde", b"b", b"ba", b"bab", b"c", b"aaaaaaa", "日本".encode(),
             b"<eos>"]
    lm = ToyLM(vocab, b"<eos>", lambda ids: [1 / len(vocab)] * len(vocab))
    lifted = Regex("x").lift(lm)
    trie = lift_module.CharTrie(vocab, list(range(len(vocab) - 1)))
    monkeypatch.setattr(lifted.text_masks, "table",
                        lambda build, *a: trie if build is lift_module.plain_char_trie
                        else Lifted._lm_table(lifted, build, *a))
    for pattern in ["[ab]*", "a+b?c?", "(ab)*a?", "[^c]{0,3}", "a{3,}|b"]:
        dfa = compile_regex(pattern)
        for start in (dfa.start, dfa.walk(dfa.start, b"a")):
            if start is None:
                continue
            got = lifted.text_masks.automata_live([[(dfa, start)]],
                                                    lifted.text_masks.table(lift_module.plain_trie))
            want = [t < len(vocab) - 1 and dfa.walk(start, vocab[t]) is not None for t in range(len(vocab))]
            assert got.tolist() == want, (pattern, start)


def test_is_text_names_the_tokens_that_stand_for_text():
    lm = toy_lm()
    lifted = Regex(r"[ab]*").lift(lm)
    no_text = ({int(i) for i in lm.eos_token_ids} | set(getattr(lm, "special_token_ids", ()))
               | {i for i, v in enumerate(lm.vocab) if not v})
    assert no_text and [t for t in range(lifted.size) if not lifted.is_text(t)] == sorted(no_text)
