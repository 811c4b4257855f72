"""LoRA adapters on HFLM: a view's log-probs equal a plain PEFT forward with that adapter, the
base model's stay the base's, and their caches never mix (hits, shared batches, unload and
reload under the same name)."""

import asyncio
import copy
import json

import numpy as np
import pytest
import torch

from smc.backends.adapters import LoraRouter
from smc.backends.base import LMBackend
from tests.smc.backends.rounding import FLOAT32_ROUNDING

peft = pytest.importorskip("peft", reason="the adapter tests need PEFT (pip install 'smc-steer[adapters]')")

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _lora(seed: int) -> "peft.LoraConfig":
    torch.manual_seed(seed)
    # init_lora_weights=False draws B as well as A at random: the adapter changes the model.
    return peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, init_lora_weights=False)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The embedded model's weights, two random LoRA adapters saved to disk ("alpha", "beta"), and
    reference log-probs from one plain, unbatched, uncached PEFT forward per context."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from smc.backends.loading import embedded_model_dir

    where = embedded_model_dir()
    base = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(where)
    dirs = {}
    ref_model = peft.get_peft_model(copy.deepcopy(base), _lora(0), adapter_name="alpha")
    ref_model.add_adapter("beta", _lora(1))
    for name in ("alpha", "beta"):
        out = tmp_path_factory.mktemp(f"lora-{name}")
        ref_model.save_pretrained(out, selected_adapters=[name])
        dirs[name] = next(p.parent for p in out.rglob("adapter_config.json"))
    ref_model.eval()
    V = base.get_output_embeddings().weight.shape[0]
    memo = {}

    @torch.inference_mode()
    def ref(adapter, ids):
        key = (adapter, tuple(ids))
        if key not in memo:
            x = torch.tensor([list(ids)])
            if adapter is None:
                with ref_model.disable_adapter():
                    logits = ref_model(input_ids=x, use_cache=False).logits
            else:
                ref_model.set_adapter(adapter)
                logits = ref_model(input_ids=x, use_cache=False).logits
            memo[key] = torch.log_softmax(logits[0, -1, :V].float(), dim=-1)
        return memo[key]

    return base, tokenizer, dirs, ref


@pytest.fixture
def lm(world):
    """A fresh HFLM over its own copy of the base weights (loading an adapter changes them in
    place), with adapter "alpha" loaded."""
    from smc.backends.hf import HFLM

    base, tokenizer, dirs, _ = world
    out = HFLM(copy.deepcopy(base), tokenizer)
    out.load_adapter(dirs["alpha"], "alpha")
    return out


def ids_of(seed: int, n: int) -> list[int]:
    return np.random.default_rng(seed).integers(17, 49152, size=n).tolist()


def close(got, want):
    diff = (got - want).abs().max().item()
    assert diff <= FLOAT32_ROUNDING, diff


@pytest.mark.slow
async def test_view_equals_plain_peft_forward_and_base_stays_base(lm, world):
    *_, ref = world
    view = lm.adapter("alpha")
    assert isinstance(view, LMBackend) and view.vocab is lm.vocab and view.encode("hi") == lm.encode("hi")
    for n in (1, 6, 19):
        ids = ids_of(n, n)
        got = await view.next_token_logprobs(ids)
        close(got, ref("alpha", ids))
        assert abs(torch.logsumexp(got.double(), 0).item()) < 1e-6
        # the adapter really changes the model, so agreement above is not agreement with the base
        assert (ref("alpha", ids) - ref(None, ids)).abs().max().item() > 0.05
        close(await lm.next_token_logprobs(ids), ref(None, ids))
    # code holding the bare model (e.g. another HFLM over it) still gets the base model
    x = torch.tensor([ids_of(6, 6)])
    with torch.inference_mode():
        bare = torch.log_softmax(lm.model(input_ids=x).logits[0, -1].float(), -1)
    close(bare, ref(None, ids_of(6, 6)))


@pytest.mark.slow
async def test_cache_hits_and_kv_reuse_stay_per_adapter(lm, world):
    *_, ref = world
    view = lm.adapter("alpha")
    prompt = ids_of(7, 12)
    base_row = await lm.next_token_logprobs(prompt)
    # the same context through the adapter: neither the base's row nor its states may be used
    before = dict(lm.stats)
    close(await view.next_token_logprobs(prompt), ref("alpha", prompt))
    assert lm.stats["cache_hits"] == before["cache_hits"]
    assert lm.stats["positions_reused"] == before["positions_reused"]
    assert lm.stats["positions_computed"] - before["positions_computed"] == 12
    # hits: exact, free, and each source gets its own row
    before = dict(lm.stats)
    close(await view.next_token_logprobs(prompt), ref("alpha", prompt))
    assert torch.equal(await lm.next_token_logprobs(prompt), base_row)
    assert lm.stats["cache_hits"] - before["cache_hits"] == 2
    assert lm.stats["forward_passes"] == before["forward_passes"]
    # extending: the adapter's own cached states are reused
    ext = prompt + ids_of(8, 3)
    before = dict(lm.stats)
    close(await view.next_token_logprobs(ext), ref("alpha", ext))
    assert lm.stats["positions_reused"] - before["positions_reused"] == 12
    assert lm.stats["positions_computed"] - before["positions_computed"] == 3
    d = await view.batch_next_token_dists([ext + [99], prompt + [5]])
    close(d.logp[0], ref("alpha", ext + [99]))
    close(d.logp[1], ref("alpha", prompt + [5]))


@pytest.mark.slow
async def test_base_and_two_adapters_share_one_forward_pass(lm, world):
    *_, dirs, ref = world
    b = lm.load_adapter(dirs["beta"], "beta")
    a = lm.adapter("alpha")
    shared = ids_of(9, 8)
    await asyncio.gather(lm.next_token_logprobs(shared), a.next_token_logprobs(shared),
                         b.next_token_logprobs(shared))
    # interleaved requests: same contexts, cached prefixes of different lengths per source
    asks = [(src, shared + ids_of(10 + k, k + 1)) for k, src in enumerate([lm, a, b, a, lm, b])]
    before = dict(lm.stats)
    out = await asyncio.gather(*(src.next_token_logprobs(ids) for src, ids in asks))
    assert lm.stats["forward_passes"] - before["forward_passes"] == 1
    assert lm.stats["positions_reused"] - before["positions_reused"] == 6 * 8
    names = {id(lm): None, id(a): "alpha", id(b): "beta"}
    for (src, ids), row in zip(asks, out):
        close(row, ref(names[id(src)], ids))


@pytest.mark.slow
async def test_unload_and_reload_never_return_a_stale_row(lm, world):
    *_, dirs, ref = world
    old = lm.adapter("alpha")
    ids = ids_of(20, 10)
    close(await old.next_token_logprobs(ids), ref("alpha", ids))
    lm.unload_adapter("alpha")
    assert lm.adapters == []
    with pytest.raises(RuntimeError, match="unloaded"):
        await old.next_token_logprobs(ids)
    with pytest.raises(KeyError, match="no adapter named 'alpha'"):
        lm.adapter("alpha")
    close(await lm.next_token_logprobs(ids), ref(None, ids))
    # the name now stands for other weights: the answer is theirs, never the cached one
    new = lm.load_adapter(dirs["beta"], "alpha")
    close(await new.next_token_logprobs(ids), ref("beta", ids))
    close(await new.next_token_logprobs(ids + [7]), ref("beta", ids + [7]))
    with pytest.raises(RuntimeError, match="unloaded"):
        await old.next_token_logprobs(ids)
    lm.unload_adapter("alpha")
    again = lm.load_adapter(dirs["alpha"], "alpha")
    close(await again.next_token_logprobs(ids), ref("alpha", ids))
    close(await lm.next_token_logprobs(ids), ref(None, ids))


@pytest.mark.slow
async def test_request_waiting_when_its_adapter_is_unloaded_fails_alone(lm, world):
    *_, ref = world
    view = lm.adapter("alpha")
    waiting = asyncio.ensure_future(view.next_token_logprobs(ids_of(30, 4)))
    base = asyncio.ensure_future(lm.next_token_logprobs(ids_of(31, 4)))
    await asyncio.sleep(0)  # both queued, the batch has not run
    lm.unload_adapter("alpha")
    with pytest.raises(RuntimeError, match="unloaded"):
        await waiting
    close(await base, ref(None, ids_of(31, 4)))


@pytest.mark.slow
def test_generate_with_an_adapter_view(lm):
    import smc
    from potentials import Regex

    r = smc.generate("Give me a number.", constraint=Regex(r"[0-9]{2}"), lm=lm.adapter("alpha"),
                     particles=2, max_tokens=4, seed=0)
    assert r.samples and all(s.text.isdigit() and len(s.text) == 2 for s in r.samples if s.finished)


def _adapter_dir(tmp_path, config: dict):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "adapter_config.json").write_text(json.dumps(config))
    return tmp_path


def test_bad_adapters_are_refused_before_loading(tmp_path):
    router = LoraRouter(model=None)  # every check below runs before the model is touched
    with pytest.raises(ValueError, match="adapter name"):
        router.load(tmp_path, "has space")
    with pytest.raises(ValueError, match="adapter name"):
        router.load(tmp_path, "__base__")
    with pytest.raises(ValueError, match="prefix"):
        router.load(tmp_path, "ora")
    _adapter_dir(tmp_path / "inner", {"peft_type": "LORA"})
    with pytest.raises(ValueError, match="no adapter_config.json.*subfolders: inner"):
        router.load(tmp_path, "x")
    with pytest.raises(ValueError, match="only LoRA"):
        router.load(_adapter_dir(tmp_path, {"peft_type": "IA3"}), "x")
    with pytest.raises(ValueError, match="DoRA"):
        router.load(_adapter_dir(tmp_path, {"peft_type": "LORA", "use_dora": True}), "x")
    with pytest.raises(ValueError, match="Hub"):
        router.load("no-such-org/no-such-adapter", "x")


@pytest.mark.slow
def test_adapter_names_are_checked(lm, world):
    *_, dirs, _ = world
    with pytest.raises(ValueError, match="already loaded"):
        lm.load_adapter(dirs["beta"], "alpha")
    with pytest.raises(KeyError, match="loaded: 'alpha'"):
        lm.adapter("beta")
    with pytest.raises(KeyError):
        lm.unload_adapter("beta")


@pytest.mark.slow
async def test_program_proposing_with_base_and_scoring_with_adapter(lm, world):
    """Target p_alpha, proposal p_base: each step's weight is log p_alpha(x) - log p_base(x),
    both sources answering within one run (the weight of one particle is checked exactly)."""
    import smc
    from smc.programs.context import LMContext

    *_, ref = world
    view = lm.adapter("alpha")

    class Adapted(smc.Model):
        def __init__(self):
            super().__init__()
            self.context = LMContext(view, "Write a poem.", chat=True)
            self.proposal = LMContext(lm, "Write a poem.", chat=True)

        async def step(self):
            await self.sample(self.context.next_token(), proposal=self.proposal.next_token())
            if self.context.done or len(self.context.tokens) >= 3:
                self.finish()

    r = await smc.smc(Adapted(), particles=1, seed=0)
    (s,) = r.samples
    assert len(s.token_ids) == 3  # no EOS drawn with this seed, so every term is a token's
    prompt = list(LMContext(lm, "Write a poem.", chat=True).prompt_ids)
    want = sum(
        (ref("alpha", prompt + list(s.token_ids[:t])) - ref(None, prompt + list(s.token_ids[:t])))[tok].item()
        for t, tok in enumerate(s.token_ids)
    )
    assert abs(s.log_weight - want) < 1e-3
    assert lm.trie.live_slots > 0 and view.trie.live_slots > 0


@pytest.mark.slow
def test_adapter_on_an_8bit_model(world):
    """PEFT's bitsandbytes LoRA layers: the view equals PEFT's own forward with the adapter
    active, on the same quantized model. Each request runs alone, one row as PEFT's forward
    here: with an adapter the 8-bit layers are not batch-independent on every CPU (bitsandbytes
    0.50.2 on one with AVX-512 and AMX: PEFT's own forward of the same 9 ids as one row and as
    each of two identical rows differ by 2.2 nats), so batches of requests are tested on the
    float model above."""
    pytest.importorskip("bitsandbytes")
    import smc

    *_, dirs, _ = world
    lm = smc.load_lm(quantization="8bit", device="cpu")
    view = lm.load_adapter(dirs["alpha"], "alpha")
    ids = ids_of(40, 9)

    async def one_after_the_other():
        return await view.next_token_logprobs(ids), await lm.next_token_logprobs(ids)

    got, base = asyncio.run(one_after_the_other())
    with torch.inference_mode():
        lm._lora.peft_model.set_adapter("alpha")
        want = torch.log_softmax(lm.model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)
        lm._lora._deactivate()
        plain = torch.log_softmax(lm.model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)
    close(got, want)
    close(base, plain)
    assert (want - plain).abs().max().item() > 0.05
