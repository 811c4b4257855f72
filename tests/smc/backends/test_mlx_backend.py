"""MLXLM (smc.backends.mlx) on the embedded model, on MLX's CPU build (``mlx[cpu]`` on Linux):
log-probs equal the HF backend's (a plain, unbatched transformers forward) over prompts, cached
and uncached rows, batched and single; counters; the backend contract; generation under each
constraint kind; a 4-bit MLX checkpoint made by mlx-lm's converter; load_lm / CLI wiring.

Tests that need MLX skip with the reason where ``mlx.core`` or ``mlx_lm`` does not import."""

import asyncio
import json
import math

import numpy as np
import pytest
import torch

import smc
from smc.api.cli import main
from smc.backends.base import COUNTERS, LMBackend, is_lm, missing_members
from smc.backends.loading import embedded_model_dir
from smc.backends.mlx import INSTALL_HINT, MLXLM, mlx_available, rope_overrides

needs_mlx = pytest.mark.skipif(
    not mlx_available(),
    reason="MLX is not installed here (mlx.core / mlx_lm do not import): pip install 'smc-steer[mlx-cpu]'",
)

#: MLX's float32 kernels against torch's: the HF backend itself moves ~4e-5 between a batched
#: and a single row; over rows whose log-probs reach -40, both sides' rounding adds up to ~1e-4
TOL = 3e-4


@pytest.fixture(scope="module")
def mlx_lm(embedded_mlx_lm):
    """The embedded model on the MLX backend (the session's, from conftest)."""
    return embedded_mlx_lm


@pytest.fixture(scope="module")
def fresh(mlx_lm):
    """A new backend (own cache, batcher and counters) over the module's MLX weights."""

    def make(**kwargs) -> MLXLM:
        return MLXLM(mlx_lm.model, mlx_lm.tokenizer, mlx_lm.config, **kwargs)

    return make


def random_ids(rng: np.random.Generator, n: int, V: int = 49152) -> list[int]:
    return rng.integers(17, V, size=n).tolist()


def assert_close(got: torch.Tensor, ref: torch.Tensor, tol: float = TOL) -> None:
    assert got.dtype == torch.float32 and got.shape == ref.shape
    diff = (got - ref).abs().max().item()
    assert diff <= tol, diff


PROMPTS = ["Give me a US phone number.", "Yes or no?"]


# ------------------------------------------------------------------ exactness against HF
@needs_mlx
@pytest.mark.slow
async def test_prompts_single_and_batched_equal_hf(fresh, embedded_lm, reference):
    lm = fresh()
    prompts = [lm.encode_chat(p) for p in PROMPTS] + [lm.encode("Once upon a time")]
    assert prompts == [embedded_lm.encode_chat(p) for p in PROMPTS] + [embedded_lm.encode("Once upon a time")]
    assert len({len(ids) for ids in prompts}) == 3  # a ragged batch
    batch = await lm.batch_next_token_logprobs(prompts)  # uncached, batched (ragged)
    assert lm.stats["forward_passes"] == 1
    for ids, row in zip(prompts, batch):
        assert_close(row, reference(ids))
        assert abs(torch.logsumexp(row.double(), 0).item()) < 1e-5
    single = fresh()
    for ids in prompts[1:]:  # uncached, one row per forward
        assert_close(await single.next_token_logprobs(ids), reference(ids))
    assert single.stats["forward_passes"] == 2


@needs_mlx
@pytest.mark.slow
async def test_ragged_batch_with_partial_hits_equals_hf(fresh, embedded_lm):
    lm = fresh(max_batch=64)
    rng = np.random.default_rng(1)
    base = [random_ids(rng, n) for n in (3, 6, 10)]
    await lm.batch_next_token_logprobs(base)  # cached prefixes of different lengths
    batch = [b + random_ids(rng, k) for b in base for k in (1, 3)]
    batch += [random_ids(rng, n) for n in (1, 5)]  # nothing cached
    batch += [base[1][:4], base[2][:8]]  # inside a cached path, no stored log-probs
    before = dict(lm.stats)
    out = await lm.batch_next_token_logprobs(batch)
    assert lm.stats["forward_passes"] == before["forward_passes"] + 1
    assert lm.stats["cache_hits"] == before["cache_hits"]
    # Reused: each extension's base, and the two inner contexts' prefixes (all but their last).
    assert lm.stats["positions_reused"] - before["positions_reused"] == 2 * (3 + 6 + 10) + 3 + 7
    # The HF backend's rows (one batched forward; its own rows move ~4e-5 from single ones).
    assert_close(out, await embedded_lm.batch_next_token_logprobs(batch))


@needs_mlx
@pytest.mark.slow
async def test_siblings_share_the_prompt_and_pay_only_new_tokens(fresh, embedded_lm):
    lm = fresh()
    prompt = lm.encode("Once upon a time, in a village by the sea,")
    await lm.next_token_logprobs(prompt)
    siblings = [prompt + [t] for t in (28, 29, 30, 31)]
    before = dict(lm.stats)
    rows = await asyncio.gather(*(lm.next_token_logprobs(s) for s in siblings))
    assert lm.stats["forward_passes"] == before["forward_passes"] + 1
    assert lm.stats["positions_computed"] - before["positions_computed"] == 4
    assert lm.stats["positions_reused"] - before["positions_reused"] == 4 * len(prompt)
    assert_close(torch.stack(rows), await embedded_lm.batch_next_token_logprobs(siblings))
    # A repeated request is a cache hit, and its row is a copy the caller may change.
    again = await lm.next_token_logprobs(siblings[0])
    assert lm.stats["cache_hits"] == before["cache_hits"] + 1
    assert torch.equal(again, rows[0])
    again[0] = 0.0
    assert not torch.equal(again, await lm.next_token_logprobs(siblings[0]))


@needs_mlx
@pytest.mark.slow
async def test_eviction_and_no_kv_cache_change_nothing(fresh):
    rng = np.random.default_rng(2)
    a, b, c = (random_ids(rng, 10) for _ in range(3))
    contexts = [a + [40], b + [41], a + [42, 43], b + [44, 45], c + [46], a + [47, 48, 49]]
    roomy = fresh()
    want = [await roomy.next_token_logprobs(ids) for ids in contexts]
    # A position's state is ~46 KB and a log-prob row ~197 KB: 1 MiB holds one context or two.
    budget = 1 << 20
    tight = fresh(cache_budget_bytes=budget)
    got = [await tight.next_token_logprobs(ids) for ids in contexts]
    assert tight.trie.evictions > 0 and tight.trie.used_bytes <= budget
    assert tight.stats["positions_reused"] > 0
    plain = fresh(kv_cache=False)
    rows = await plain.batch_next_token_logprobs(contexts)
    assert plain.stats["positions_reused"] == 0
    assert plain.stats["forward_passes"] == len({len(ids) for ids in contexts})  # one per length
    for w, g, r in zip(want, got, rows):
        assert (w - g).abs().max().item() <= 1e-5
        assert (w - r).abs().max().item() <= TOL


@needs_mlx
@pytest.mark.slow
async def test_next_token_dists_are_the_rows(fresh):
    lm = fresh()
    rng = np.random.default_rng(3)
    batch = [random_ids(rng, n) for n in (3, 7)]
    batch.append(batch[0])  # a repeat is run once
    dists = await lm.batch_next_token_dists(batch)
    assert lm.stats["batch_rows"] == 2 and lm.stats["requests"] == 3
    rows = await fresh().batch_next_token_logprobs(batch)
    assert (dists.logp - rows).abs().max().item() <= 1e-5
    assert dists.cdf.dtype == torch.float64
    assert torch.allclose(dists.cdf[:, -1], torch.ones(3, dtype=torch.float64), atol=1e-6)


# ------------------------------------------------------------------ contract
@needs_mlx
@pytest.mark.slow
def test_mlx_backend_is_a_backend(mlx_lm, embedded_lm):
    assert is_lm(mlx_lm) and isinstance(mlx_lm, LMBackend) and missing_members(mlx_lm) == []
    assert set(COUNTERS) <= set(mlx_lm.stats)
    assert mlx_lm.vocab == embedded_lm.vocab
    assert mlx_lm.eos_token_ids == embedded_lm.eos_token_ids == [2]
    assert mlx_lm.special_token_ids == embedded_lm.special_token_ids
    assert mlx_lm.max_context == embedded_lm.max_context == 8192
    assert mlx_lm.is_chat and mlx_lm.encode_chat("hi") == embedded_lm.encode_chat("hi")
    assert mlx_lm.shared_by_particles
    with pytest.raises(ValueError, match="empty token list"):
        asyncio.run(mlx_lm.next_token_logprobs([]))
    with pytest.raises(ValueError, match="out of range"):
        asyncio.run(mlx_lm.next_token_logprobs([len(mlx_lm.vocab)]))


def test_rope_parameters_are_lifted_for_mlx_lm():
    """transformers 5 keeps rope settings under ``rope_parameters``; mlx-lm reads top-level
    names (and would silently use theta = 10000 for the embedded model's 100000)."""
    config = {"rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"}}
    assert rope_overrides(config) == {"rope_theta": 100000.0}
    assert rope_overrides({**config, "rope_theta": 5.0}) == {}
    scaled = {"rope_parameters": {"rope_theta": 5e5, "rope_type": "llama3", "factor": 8.0}}
    assert rope_overrides(scaled) == {"rope_theta": 5e5, "rope_scaling": scaled["rope_parameters"]}
    assert rope_overrides({"rope_theta": 1e4}) == {}


def test_load_lm_checks_mlx_arguments_before_loading(monkeypatch):
    with pytest.raises(TypeError, match="unknown argument.*mlx backend: quantization"):
        smc.load_lm(backend="mlx", quantization="4bit")
    with pytest.raises(ValueError, match="unknown MLX device 'cuda'"):
        smc.load_lm(backend="mlx", device="cuda")
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        smc.load_lm(backend="mlx", dtype="int8")
    with pytest.raises(ValueError, match="max_batch must be an integer >= 1"):
        smc.load_lm(backend="mlx", max_batch=0)
    with pytest.raises(ValueError, match="choose 'hf', 'vllm' or 'mlx'"):
        smc.load_lm(backend="metal")
    # Where MLX does not import, the error says what to install.
    import smc.backends.mlx as mlx_module

    monkeypatch.setattr(mlx_module, "mlx_available", lambda: False)
    with pytest.raises(ImportError, match=r"smc-steer\[mlx-cpu\]"):
        smc.load_lm(backend="mlx")
    assert "smc-steer[mlx]" in INSTALL_HINT


@needs_mlx
@pytest.mark.slow
def test_cli_backend_mlx(mlx_lm, monkeypatch, capsys):
    loaded = []

    def from_pretrained(path, **kwargs):
        loaded.append((path, kwargs))
        return mlx_lm

    monkeypatch.setattr(MLXLM, "from_pretrained", from_pretrained)
    status = main(["generate", "--prompt", "Answer yes or no.", "--regex", "(yes|no)",
                   "--particles", "2", "--max-tokens", "4", "--seed", "0", "--backend", "mlx",
                   "--json", "--quiet"])
    assert status == 0 and len(loaded) == 1
    out = json.loads(capsys.readouterr().out)
    assert all(s["text"] in ("yes", "no") for s in out["samples"] if s["finished"])


# ------------------------------------------------------------------ generation
@needs_mlx
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["regex", "grammar", "json"])
def test_generate_with_each_constraint_kind(mlx_lm, kind):
    from potentials import Grammar, JSONSchema, Regex

    if kind == "regex":
        constraint, prompt, ok = Regex(r"[0-9]{3}-[0-9]{4}"), "Give me a phone number.", None
    elif kind == "grammar":
        constraint = Grammar('start: "yes" | "no" | "maybe"')
        prompt, ok = "Answer yes, no or maybe.", {"yes", "no", "maybe"}
    else:
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}},
                  "required": ["ok"], "additionalProperties": False}
        constraint, prompt, ok = JSONSchema(schema), "Reply with a JSON object.", None
    r = smc.generate(prompt, constraint=constraint, lm=mlx_lm, particles=4, max_tokens=12, seed=0)
    finished = [s for s in r.samples if s.finished]
    assert finished and math.isfinite(r.log_ml)
    for s in finished:
        if kind == "regex":
            import re

            assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", s.text), s.text
        elif kind == "grammar":
            assert s.text in ok
        else:
            assert isinstance(json.loads(s.text)["ok"], bool)
    assert r.stats["lm_forward_passes"] > 0


# ------------------------------------------------------------------ 4-bit MLX checkpoint
@pytest.fixture(scope="module")
def q4_dir(tmp_path_factory, mlx_lm):
    """A 4-bit (group size 64) MLX checkpoint of the embedded model, made by mlx-lm's
    converter from the cached safetensors folder."""
    from mlx_lm import convert

    target = tmp_path_factory.mktemp("mlx-q4") / "SmolLM2-135M-Instruct-4bit"
    convert(str(embedded_model_dir()), mlx_path=str(target), quantize=True, q_bits=4, q_group_size=64)
    return target


@needs_mlx
@pytest.mark.slow
async def test_four_bit_checkpoint_loads_and_is_consistent(q4_dir, mlx_lm):
    import mlx.nn as nn

    config = json.loads((q4_dir / "config.json").read_text())
    assert config["quantization"]["bits"] == 4
    lm = smc.load_lm(q4_dir, backend="mlx")
    assert isinstance(lm.model.model.layers[0].self_attn.q_proj, nn.QuantizedLinear)
    assert lm.vocab == mlx_lm.vocab and lm.eos_token_ids == mlx_lm.eos_token_ids
    prompt = lm.encode("The capital of France is")
    rng = np.random.default_rng(4)
    contexts = [prompt + random_ids(rng, k) for k in (1, 2, 5)]
    cached = [await lm.next_token_logprobs(prompt)] + list(await lm.batch_next_token_logprobs(contexts))
    assert lm.stats["positions_reused"] > 0
    plain = MLXLM(lm.model, lm.tokenizer, lm.config, kv_cache=False)
    uncached = await plain.batch_next_token_logprobs([prompt] + contexts)
    for a, b in zip(cached, uncached):
        assert (a - b).abs().max().item() <= TOL
        assert abs(torch.logsumexp(a.double(), 0).item()) < 1e-5
    # 4 bits of a 135M model move its next-token law (KL 1.1 nats here), but stay far nearer
    # the float32 model's than a wrong load would (the float model's row one token earlier
    # is 8.9 nats away).
    full = await mlx_lm.next_token_logprobs(prompt)
    kl = torch.sum(full.exp() * (full - cached[0])).item()
    assert 0 < kl < 2.0, kl
    r = smc.generate("Answer yes or no.", constraint=smc_regex("(yes|no)"), lm=lm,
                     particles=2, max_tokens=4, seed=0)
    assert all(s.text in ("yes", "no") for s in r.samples if s.finished)


def smc_regex(pattern: str):
    from potentials import Regex

    return Regex(pattern)
