"""The last step before the forced EOS (potentials.last_step, TokenSampler.for_last_step): its target
is the inner potential's restricted to tokens after which the text can finish, its samplers are
properly weighted for it (exact enumeration), and SMC keeps an unbiased Ẑ and the same posterior
(design.md tests 1 and 2) while no longer spending particles on texts the forced EOS kills."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
import regex

import smc
from potentials import JSONSchema, Regex
from smc.core.logmath import NEG_INF
from potentials.last_step import LastStep
from potentials.lift import Lifted
from samplers import AWRSSampler, DirectSampler, MaskingSampler, ProposalSampler
from tests.toy_problems import FastToyLM, TokenPredicate, enumerate_paths, exact_target

# "(ab)+" over a vocabulary whose LM prefers "a" and rarely ends: a particle at the last step
# usually holds "...ab" or "...a", and "a" after "ab" (or "b"/"a" wrongly placed) cannot finish
VOCAB = [b"a", b"b", b"ab", b"ba", b"<eos>"]
EOS = 4
PATTERN = "(ab)+"
# the same language on the `regex` fallback (a backreference): its own completion fast path
PATTERNS = ["(ab)+", r"(ab)\1*"]


def lm_probs(ids):
    return [0.45, 0.3, 0.1, 0.1, 0.05] if len(ids) % 2 == 0 else [0.3, 0.4, 0.1, 0.15, 0.05]


LM = FastToyLM(VOCAB, b"<eos>", lm_probs)


def _lifted(pattern: str = PATTERN):
    return Lifted(Regex(pattern), LM)


def _text(x: tuple[int, ...]) -> str:
    return b"".join(VOCAB[t] for t in x).decode()


def _full(x: tuple[int, ...]) -> bool:
    return regex.fullmatch(PATTERN, _text(x)) is not None


def _viable(x: tuple[int, ...]) -> bool:
    return EOS not in x and regex.fullmatch(PATTERN, _text(x), partial=True) is not None


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("ctx", [(), (0,), (2,), (0, 1), (2, 0), (1,)])
def test_weights_are_the_inner_ones_where_the_text_can_finish(ctx, pattern):
    inner = _lifted(pattern)
    assert inner.potential.exact == (pattern == PATTERN)
    fin = LastStep(inner)
    base = asyncio.run(inner.logw_next(ctx))
    got = asyncio.run(fin.logw_next(ctx))
    for a in range(len(VOCAB)):
        if a == EOS:
            assert got[a] == base[a]
        else:
            finishes = _full(ctx + (a,))
            assert got[a] == (base[a] if finishes else NEG_INF), (ctx, a)
    np.testing.assert_array_equal(asyncio.run(fin.logw_subset(ctx, [3, 0, EOS, 2])), got[[3, 0, EOS, 2]])
    got[:] = 7.0  # a caller writing into its row does not change the cached one
    np.testing.assert_array_equal(asyncio.run(fin.logw_next(ctx)), asyncio.run(LastStep(inner).logw_next(ctx)))
    got = asyncio.run(fin.logw_next(ctx))
    # known without logw_next once the DFA state's walk is cached; at once on the fallback
    support = asyncio.run(fin.known_support(ctx))
    assert support is not None
    assert support.tolist() == np.flatnonzero(got > NEG_INF).tolist() and np.all(got[support] == 0.0)
    # the generic path (any token-level potential) agrees with the lifted fast path
    pred = TokenPredicate(len(VOCAB), [EOS], _viable, _full)
    np.testing.assert_array_equal(asyncio.run(LastStep(pred).logw_next(ctx)), got)


@pytest.mark.parametrize("ctx", [(), (0,), (2,), (2, 0)])
@pytest.mark.parametrize("make", [
    lambda pot: DirectSampler(LM, pot),
    lambda pot: AWRSSampler(LM, pot),
    lambda pot: AWRSSampler(LM, pot, max_checks=1),
    lambda pot: ProposalSampler(LM, pot, inner=AWRSSampler),
], ids=["direct", "awrs", "awrs-cap1", "proposal-awrs"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_last_step_sampler_is_properly_weighted_by_enumeration(make, ctx, pattern):
    sampler = make(_lifted(pattern)).for_last_step()
    assert isinstance(sampler.potential, LastStep)
    assert make(_lifted()).for_last_step() is not None and sampler.for_last_step() is not sampler
    want = np.exp(np.log(np.array(lm_probs(ctx))) + asyncio.run(sampler.potential.logw_next(ctx)))
    acc = np.zeros(len(VOCAB))
    paths = enumerate_paths(lambda draw: asyncio.run(sampler.sample(ctx, draw)))
    assert math.isclose(sum(p for p, _ in paths), 1.0, rel_tol=1e-9)
    for prob, (token, w) in paths:
        if w > NEG_INF:
            acc[token] += prob * math.exp(w)
    np.testing.assert_allclose(acc, want, rtol=1e-9, atol=1e-12)


# JSON-ish tokens: documents end in "}" (an object root) or whitespace; many tokens end in other
# bytes that can never end a document ("1", ":", "a") or in "}" without finishing ("a}")
JSON_VOCAB = [b"{", b"}", b'"', b'"a', b'":', b" ", b"1", b"12", b"}\n", b'"}', b'a"}', b"a", b",",
              b"\n", b'"a":', b"1}", b"e", b" }", b"a}", b"2 ", b"<eos>"]
JSON_LM = FastToyLM(JSON_VOCAB, b"<eos>", lambda ids: [1.0] * len(JSON_VOCAB))
OBJECT = {"type": "object", "properties": {"a": {"type": "integer", "maximum": 15}}, "required": ["a"]}


@pytest.mark.parametrize("constraint", [
    lambda: JSONSchema(OBJECT),
    lambda: JSONSchema(OBJECT, whitespace="compact"),
    lambda: JSONSchema(OBJECT, whitespace=2),  # whitespace may follow the document
    lambda: JSONSchema({}),  # any root value: final bytes are every kind's last byte
    lambda: JSONSchema(OBJECT) * Regex(r'[^ ]*'),  # a product: both factors' final bytes
    lambda: Regex(r'\{"a":1+\}\s?'),  # a DFA: one walk per complete_key
], ids=["object", "object-compact", "object-ws2", "any", "product", "regex"])
@pytest.mark.parametrize("mask_first", [False, True])
def test_lifted_finishing_is_every_token_after_which_the_text_completes(constraint, mask_first):
    texts = ["", "{", '{"a', '{"a":', '{"a":1', '{"a": 12', '{"a":1}', '{"a":12 ', '{"a":"', "1", '"a']
    lifted = Lifted(constraint(), JSON_LM)
    eos = len(JSON_VOCAB) - 1
    for text in texts:
        ctx = tuple(JSON_LM.encode(text)) if text else ()
        assert b"".join(JSON_VOCAB[t] for t in ctx).decode() == text
        if mask_first:  # a cached mask at this state narrows the candidates first
            asyncio.run(lifted.logw_next(ctx))
        want = [t for t in range(eos) if asyncio.run(lifted.complete(ctx + (t,))) > NEG_INF]
        assert asyncio.run(lifted.last_step_mask(ctx)).tolist() == want, text
        support = asyncio.run(LastStep(lifted).known_support(ctx))
        if support is not None:  # the ending tokens and EOS where the text may end
            done = asyncio.run(lifted.complete(ctx)) > NEG_INF
            assert support.tolist() == want + [eos] * done, text
    final = lifted.potential.final_bytes()
    if isinstance(lifted.potential, JSONSchema) and lifted.potential.schema == OBJECT:
        # flexible and compact allow no whitespace after the document, an int n a run of n
        trailing = isinstance(lifted.potential.whitespace, int)
        assert set(final) == set(b"} \t\n\r" if trailing else b"}")


def test_finishing_is_built_once_and_only_with_a_potential():
    s = AWRSSampler(LM, _lifted())
    assert s.for_last_step() is s.for_last_step() and s.for_last_step().stats is s.stats
    plain = AWRSSampler(LM, None)
    assert plain.for_last_step() is plain
    masking = MaskingSampler(LM, _lifted())
    assert masking.for_last_step() is masking  # the improper baseline stays plain masking
    with pytest.raises(TypeError, match="Potential"):
        LastStep("(ab)+")


@pytest.mark.parametrize("max_tokens", [3, 4])
@pytest.mark.parametrize("ess", [0.0, 0.5])
def test_smc_z_unbiased_and_every_run_finishes(max_tokens, ess):
    z = sum(exact_target(LM, lambda x: 0.0 if _full(x) else NEG_INF, max_tokens).values())
    zs, finished_runs = [], 0
    runs = 300
    for seed in range(runs):
        r = smc.generate("", Regex(PATTERN), lm=LM, particles=4, max_tokens=max_tokens, seed=seed,
                         ess_threshold=ess, chat=False, progress=False)
        zs.append(math.exp(r.log_ml) if r.log_ml > NEG_INF else 0.0)
        done = [s for s in r.samples if s.finished]
        assert all(_full(tuple(s.token_ids)) for s in done)
        finished_runs += bool(done)
    mean, se = np.mean(zs), np.std(zs, ddof=1) / math.sqrt(runs)
    assert abs(mean - z) < 3 * se + 1e-12, (mean, z, se)
    # every particle alive at the last step now ends on a finished text
    assert finished_runs == runs


@pytest.mark.slow
def test_issue10_pattern_finishes_on_the_embedded_model(embedded_lm):
    # `(?>(?:a|b)(?>c|d))+` with genlm-eval's prompt: the model writes pairs and never EOS; at
    # the last step only a token that completes a pair may be drawn, so the forced EOS finishes
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "benchmarks" / "bench_patterns.py"
    spec = importlib.util.spec_from_file_location("bench_patterns", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    pattern = r"(?>(?:a|b)(?>c|d))+"
    r = smc.generate(bench.prompt_for(pattern), Regex(pattern), lm=embedded_lm, particles=5,
                     max_tokens=32, seed=0, chat=False, progress=False)
    done = [s for s in r.samples if s.finished]
    assert done and r.log_ml > NEG_INF
    assert all(regex.fullmatch(pattern, s.text) for s in done)
