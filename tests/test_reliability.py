"""Reliability: every bad input gets one clear error (type and message), nothing hangs, a failed
run leaves the LM usable, and the prefix cache stays within its byte budget.

The tables below are adversarial inputs (and their neighbours): each row is an
input, the exception type it must raise and a substring its message must contain. CLI rows run
``python -m smc`` in a subprocess and assert exit status 2 with exactly one line on stderr.
Timing bounds ("no hang") are generous: they catch a hang, not a slowdown.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import smc
from potentials import Grammar, Predicate, Regex
from smc.api.cli import main as cli_main
from smc.backends.kvtrie import KVTrie
from smc.engine import MAX_PARTICLES, check_smc_args
from tests.toy_problems import FastToyLM

ROOT = Path(__file__).resolve().parent.parent
VOCAB = ["1", "2", "12", "-", "a", "$"]


def probs(ids):
    base = np.array([0.25, 0.2, 0.15, 0.15, 0.1, 0.15])
    return np.roll(base[:5], len(ids)).tolist() + [0.15]


def toy() -> FastToyLM:
    return FastToyLM(VOCAB, "$", probs)


def within(seconds: float, fn, *args, **kwargs):
    """fn(*args, **kwargs) on a daemon thread; fails the test if it has not returned (or raised)
    after ``seconds``; returns (result, exception)."""
    out: dict = {}

    def target():
        try:
            out["result"] = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            out["error"] = e

    t = threading.Thread(target=target, daemon=True)
    start = time.perf_counter()
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn!r} still running after {seconds} s (a hang)"
    out["elapsed"] = time.perf_counter() - start
    return out


# --------------------------------------------------------------------------- generate / agenerate
class _NotAnLM:
    vocab = ["a"]


BAD_GENERATE = [
    (dict(seed="x"), TypeError, "seed must be a non-negative integer or None, got 'x'"),
    (dict(seed=-1), ValueError, "seed must be a non-negative integer or None, got -1"),
    (dict(seed=1.5), TypeError, "seed must be a non-negative integer"),
    (dict(seed=True), TypeError, "seed must be a non-negative integer"),
    (dict(prompt="\ud800"), ValueError, "prompt is not valid Unicode text: '\\ud800' at position 0"),
    (dict(prompt="ok\udcff"), ValueError, "at position 2 is a lone surrogate"),
    (dict(prompt=None), TypeError, "prompt must be a string, got NoneType"),
    (dict(prompt=b"bytes"), TypeError, "prompt must be a string, got bytes"),
    (dict(lm="nosuch"), TypeError, "pass lm=smc.load_lm('nosuch')"),
    (dict(lm=Path("some/dir")), TypeError, "lm must be a language-model backend"),
    (dict(lm=object()), TypeError, "object has no vocab, eos_token_ids, encode"),
    (dict(lm=_NotAnLM()), TypeError, "_NotAnLM has no eos_token_ids"),
    (dict(sampler=["awrs"]), TypeError, "sampler must be a string"),
    (dict(sampler="fast"), ValueError, "unknown sampler 'fast'"),
    (dict(sampler=None), TypeError, "sampler must be a string"),
    (dict(particles=10**6), ValueError, f"limit of {MAX_PARTICLES:,} particles"),
    (dict(particles=MAX_PARTICLES + 1), ValueError, "more than the limit"),
    (dict(particles=0), ValueError, "particles must be an integer >= 1, got 0"),
    (dict(particles=-3), ValueError, "particles must be an integer >= 1"),
    (dict(particles=2.0), ValueError, "particles must be an integer >= 1, got 2.0"),
    (dict(particles="4"), ValueError, "particles must be an integer"),
    (dict(particles=True), ValueError, "particles must be an integer"),
    (dict(max_tokens=0), ValueError, "max_tokens must be an integer >= 1, got 0"),
    (dict(max_tokens=3.0), ValueError, "max_tokens must be an integer >= 1"),
    (dict(max_tokens=None), ValueError, "max_tokens must be an integer >= 1"),
    (dict(ess_threshold=float("nan")), ValueError, "ess_threshold must be a number in [0, 1]"),
    (dict(ess_threshold=1.5), ValueError, "ess_threshold must be a number in [0, 1], got 1.5"),
    (dict(ess_threshold="0.5"), ValueError, "ess_threshold must be a number"),
    (dict(resampling="best"), ValueError, "unknown resampling scheme 'best'"),
    (dict(resampling=None), TypeError, "resampling must be a string"),
    (dict(resampling=["multinomial"]), TypeError, "resampling must be a string"),
    (dict(chat="yes"), TypeError, "chat must be True, False or None, got 'yes'"),
    (dict(chat=True), ValueError, "chat=True but the LM (FastToyLM) has no chat template"),
    (dict(progress="x"), TypeError, "progress must be True, False or None"),
    (dict(critic=5), TypeError, "critic must be a function of a particle"),
    (dict(constraint="[0-9]+"), TypeError, "constraint must be a Potential (e.g. potentials.Regex)"),
    (dict(constraint=Regex("1").lift(FastToyLM(["x", "$"], "$", lambda ids: [0.5, 0.5]))),
     ValueError, "constraint has 2 symbols but the LM vocabulary has 6 tokens"),
]


def _call_kwargs(case: dict) -> tuple[str, dict]:
    kwargs = dict(lm=toy(), particles=2, max_tokens=3, seed=0, progress=False)
    kwargs.update(case)
    prompt = kwargs.pop("prompt", "")
    constraint = kwargs.pop("constraint", None)
    return prompt, dict(constraint=constraint, **kwargs)


def _case_id(case: dict) -> str:
    # Object addresses left out: pytest-xdist's workers must collect the same test ids.
    return re.sub(r" at 0x[0-9a-f]+", "", repr(case))[:60]


@pytest.mark.parametrize("case,exc,msg", BAD_GENERATE, ids=[_case_id(c) for c, _, _ in BAD_GENERATE])
def test_generate_bad_input_is_one_clear_error(case, exc, msg):
    prompt, kwargs = _call_kwargs(case)
    lm = kwargs["lm"]
    with pytest.raises(exc) as info:
        smc.generate(prompt, **kwargs)
    assert msg in str(info.value)
    assert isinstance(info.value, exc) and isinstance(info.value, smc.SmcSteerError)
    if isinstance(lm, FastToyLM):
        assert lm.stats["requests"] == 0  # refused before any work


@pytest.mark.parametrize("case,exc,msg", BAD_GENERATE[:16], ids=[_case_id(c) for c, _, _ in BAD_GENERATE[:16]])
async def test_agenerate_bad_input_is_the_same_error(case, exc, msg):
    prompt, kwargs = _call_kwargs(case)
    with pytest.raises(exc, match=None) as info:
        await smc.agenerate(prompt, **kwargs)
    assert msg in str(info.value)


def test_check_smc_args_table():
    for args, exc, msg in [
        ((10**6, 0.5, "multinomial"), ValueError, "limit of 100,000"),
        ((4, 0.5, "multinomial", -1), ValueError, "seed must be a non-negative integer"),
        ((4, 0.5, "multinomial", "x"), TypeError, "seed must be a non-negative integer"),
        ((4, 0.5, ["systematic"]), TypeError, "resampling must be a string"),
    ]:
        with pytest.raises(exc, match=msg.replace("(", r"\(")):
            check_smc_args(*args)
    check_smc_args(MAX_PARTICLES, 0.5, "systematic", np.int64(3))  # the limit itself is allowed


def test_particles_beyond_memory_are_refused_before_work(monkeypatch):
    import smc.api.generation as gen

    lm = toy()
    # 6 tokens x 16 bytes x 1000 particles = 96,000 bytes needed; pretend 50,000 are free.
    monkeypatch.setattr(gen, "available_memory_bytes", lambda: 50_000)
    with pytest.raises(ValueError, match=r"particles=1000 needs about .* use at most about 520 particles"):
        smc.generate("", lm=lm, particles=1000, max_tokens=3, progress=False)
    assert lm.stats["requests"] == 0
    r = smc.generate("", lm=lm, particles=500, max_tokens=3, progress=False)
    assert len(r.samples) == 500


def test_particle_limit_fails_at_once_without_warnings(recwarn):
    out = within(10, smc.generate, "", lm=toy(), particles=10**6, progress=False)
    assert isinstance(out["error"], ValueError) and out["elapsed"] < 5
    assert len(recwarn) == 0


# --------------------------------------------------------------------------- a failed run is harmless
def _reference(lm_factory, constraint_factory, **kw):
    r = smc.generate("", constraint_factory(), lm=lm_factory(), particles=6, max_tokens=5, seed=3,
                     progress=False, **kw)
    return [s.text for s in r.samples], r.log_ml


class Boom(Exception):
    pass


def _exploding_predicate(after: int):
    calls = {"n": 0}

    def check(text: str) -> bool:
        calls["n"] += 1
        if calls["n"] > after:
            raise Boom("predicate failed")
        return "a" not in text

    return Predicate(check, prefix=check)


@pytest.mark.parametrize("sampler", ["awrs", "direct"])
def test_failed_run_leaves_toy_lm_usable(sampler):
    constraint = lambda: Predicate(lambda t: "a" not in t, prefix=lambda t: "a" not in t)  # noqa: E731
    texts, log_ml = _reference(toy, constraint, sampler=sampler)
    lm = toy()
    with pytest.raises(Boom):
        smc.generate("", _exploding_predicate(5), lm=lm, particles=6, max_tokens=5, seed=3,
                     sampler=sampler, progress=False)
    r = smc.generate("", constraint(), lm=lm, particles=6, max_tokens=5, seed=3, sampler=sampler,
                     progress=False)
    assert [s.text for s in r.samples] == texts and r.log_ml == pytest.approx(log_ml, abs=1e-12)


async def test_cancelled_run_leaves_toy_lm_usable():
    constraint = lambda: Regex(r"[12]{2}-[12]")  # noqa: E731
    lm = toy()
    ref = await smc.agenerate("", constraint(), lm=toy(), particles=8, max_tokens=5, seed=4, progress=False)
    task = asyncio.ensure_future(
        smc.agenerate("", constraint(), lm=lm, particles=8, max_tokens=5, seed=4, progress=False)
    )
    for _ in range(10_000):  # until the run has asked the LM for something
        await asyncio.sleep(0)
        if lm.stats["requests"]:
            break
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert lm.stats["requests"] > 0  # it was cancelled mid-run, not before it started
    r = await smc.agenerate("", constraint(), lm=lm, particles=8, max_tokens=5, seed=4, progress=False)
    assert [s.text for s in r.samples] == [s.text for s in ref.samples]
    assert r.log_ml == pytest.approx(ref.log_ml, abs=1e-12)


@pytest.mark.slow
def test_failed_and_cancelled_runs_leave_embedded_lm_usable(embedded_lm):
    from smc.backends.hf import HFLM

    def fresh():
        return HFLM(embedded_lm.model, embedded_lm.tokenizer, cache_budget_bytes=16 << 20)

    constraint = lambda: Predicate(lambda t: "a" not in t, prefix=lambda t: "a" not in t)  # noqa: E731
    kw = dict(particles=4, max_tokens=4, seed=7, progress=False)
    ref = smc.generate("Name a colour:", constraint(), lm=fresh(), **kw)

    lm = fresh()
    with pytest.raises(Boom):
        smc.generate("Name a colour:", _exploding_predicate(3), lm=lm, **kw)
    assert lm.stats["forward_passes"] > 0

    async def cancel_midway():
        task = asyncio.ensure_future(smc.agenerate("Name a colour:", constraint(), lm=lm, **kw))
        while lm.stats["forward_passes"] < 3:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_midway())
    r = smc.generate("Name a colour:", constraint(), lm=lm, **kw)
    assert [s.text for s in r.samples] == [s.text for s in ref.samples]
    assert r.log_ml == pytest.approx(ref.log_ml, abs=1e-4)
    assert lm.trie.used_bytes <= lm.trie.budget_bytes


# --------------------------------------------------------------------------- load_lm
def test_load_lm_bad_input_table(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    a_file = tmp_path / "weights.bin"
    a_file.write_bytes(b"\0")
    cases = [
        (dict(name=str(empty)), ValueError, "is a directory without a model in it (no config.json)"),
        (dict(name=empty), ValueError, "no config.json"),
        (dict(name=str(a_file)), ValueError, "is a file, not a model directory"),
        (dict(name="./no/such/dir"), ValueError, "no such model directory: './no/such/dir'"),
        (dict(name="/no/such/dir"), ValueError, "no such model directory"),
        (dict(name="not a model id"), ValueError, "neither an existing directory nor a valid Hugging Face Hub id"),
        (dict(name=""), ValueError, "model name must be a non-empty string"),
        (dict(name=42), TypeError, "model name must be a string or a path, got int"),
        (dict(backend="tpu"), ValueError, "unknown backend 'tpu'"),
        (dict(backend=["hf"]), ValueError, "unknown backend ['hf']"),
        (dict(device="tpu"), ValueError, "invalid device 'tpu'"),
        (dict(device=3.5), TypeError, "device must be a string"),
        (dict(device="cuda:99"), ValueError, "cuda:99"),
        (dict(max_btch=4), TypeError, "unknown argument(s) for the hf backend: max_btch"),
        (dict(cache_budget_bytes=-1), ValueError, "cache_budget_bytes must be an integer >= 0, got -1"),
        (dict(cache_budget_bytes="1GB"), ValueError, "cache_budget_bytes must be an integer"),
        (dict(max_batch=0), ValueError, "max_batch must be an integer >= 1, got 0"),
        (dict(kv_cache="yes"), ValueError, "kv_cache must be True, False or None"),
    ]
    if not torch.cuda.is_available():
        cases.append((dict(device="cuda"), ValueError, "device='cuda' but CUDA is not available"))
    for kwargs, exc, msg in cases:
        out = within(10, smc.load_lm, **kwargs)
        err = out.get("error")
        assert isinstance(err, exc) and isinstance(err, smc.SmcSteerError), (kwargs, err)
        assert msg in str(err), (kwargs, str(err))
        assert out["elapsed"] < 5, kwargs  # checked before any model is loaded


@pytest.mark.skipif(__import__("importlib").util.find_spec("vllm") is not None, reason="vLLM installed")
def test_vllm_missing_names_the_install_command():
    with pytest.raises(ImportError, match=r"pip install 'smc-steer\[vllm\]'"):
        smc.load_lm(backend="vllm")


def test_unknown_hub_model_offline_fails_fast():
    # conftest sets HF_HUB_OFFLINE=1: only the local cache is consulted.
    out = within(30, smc.load_lm, "nosuch-org/nosuch-model")
    assert isinstance(out["error"], ValueError)
    assert "not in the Hugging Face cache" in str(out["error"]) and "HF_HUB_OFFLINE" in str(out["error"])
    assert out["elapsed"] < 10


def test_hub_probe_is_bounded_when_the_network_hangs(monkeypatch):
    import huggingface_hub.constants as hc

    import smc.backends.loading as loading

    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", False)

    def hanging(*args, **kwargs):
        time.sleep(5)  # e.g. name resolution that does not answer
        raise OSError("timed out")

    monkeypatch.setattr(loading.urllib.request, "urlopen", hanging)
    out = within(10, loading.hub_reachable, 0.5)
    assert out["result"] is False and out["elapsed"] < 3
    monkeypatch.setattr(loading, "HUB_PROBE_TIMEOUT_S", 0.5)
    out = within(30, smc.load_lm, "nosuch-org/nosuch-model")
    assert isinstance(out["error"], ValueError) and "cannot be reached" in str(out["error"])


def test_hub_id_paths_online_and_from_cache(monkeypatch, tmp_path):
    """With the Hub reachable a Hub id goes to from_pretrained as it is; offline, a cached
    snapshot is loaded from its directory."""
    import huggingface_hub

    import smc.backends.loading as loading
    from smc.backends.hf import HFLM

    seen = []
    monkeypatch.setattr(HFLM, "from_pretrained", classmethod(lambda cls, name, **kw: seen.append(name) or "lm"))
    monkeypatch.setattr(loading, "hub_reachable", lambda timeout=0: True)
    assert smc.load_lm("org/model") == "lm" and seen == ["org/model"]
    monkeypatch.setattr(loading, "hub_reachable", lambda timeout=0: False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo, local_files_only: str(tmp_path))
    assert smc.load_lm("org/model") == "lm" and seen[-1] == str(tmp_path)


# --------------------------------------------------------------------------- Grammar
BAD_GRAMMARS = [
    ("start: A\nA: /a(/\n", "invalid Lark grammar: error: missing ) at position 2"),
    ("%import nosuchmod.FOO\nstart: FOO\n", "found no grammar file 'nosuchmod.lark'"),
    ('start: "\ud800"\n', "grammar text is not valid Unicode: '\\ud800' at position 8"),
    ("start: " + "(" * 3000 + '"a"' + ")" * 3000 + "\n", "invalid Lark grammar"),
    ("start: A\nA: /a{5,3}/\n", "min repeat greater than max repeat"),
    ("start: A\nA: /[z-a]/\n", "bad character range"),
    ("start: A\nA: /a**/\n", "multiple repeat"),
    ("start: x\n", "Rule 'x' used but not defined"),
    ("", "invalid Lark grammar"),
    ("start: A\nA: /(?<=a)b/\n", "terminal A is not supported"),
    ("start: A\nA: /(?P<n>a)(?P=n)/\n", "terminal A is not supported"),
    ("start: A\n%declare A\n", "terminal A has no pattern"),
]


@pytest.mark.parametrize("text,msg", BAD_GRAMMARS, ids=[repr(t)[:40] for t, _ in BAD_GRAMMARS])
def test_bad_grammar_is_one_value_error(text, msg):
    out = within(30, Grammar, text)
    assert type(out.get("error")) is ValueError, out
    assert msg in str(out["error"])
    assert "\n" not in str(out["error"]).strip() or "invalid Lark grammar" in str(out["error"])


def test_grammar_argument_types():
    with pytest.raises(TypeError, match="lark_text must be a str, got bytes"):
        Grammar(b"start: 'a'")
    with pytest.raises(TypeError, match="start must be a str"):
        Grammar("start: 'a'", start=1)


# --------------------------------------------------------------------------- CLI
def _cli_cases(tmp: Path) -> list[tuple[list, str]]:
    bad_regex = tmp / "bad.lark"
    bad_regex.write_text("start: A\nA: /a(/\n")
    latin1 = tmp / "latin1.lark"
    latin1.write_bytes(b'start: "caf\xe9"\n')
    imports = tmp / "imp.lark"
    imports.write_text("%import nosuchmod.FOO\nstart: FOO\n")
    bad_json = tmp / "s.json"
    bad_json.write_text("{not json")
    latin_json = tmp / "l.json"
    latin_json.write_bytes(b'{"const": "\xe9"}')
    empty = tmp / "emptydir"
    empty.mkdir()
    base = ["generate", "--prompt", "x", "--quiet"]
    return [
        (["generate", "--prompt", b"\xff", "--regex", "a"], "--prompt is not valid Unicode text"),
        (["generate", "--prompt", "x", "--regex", b"\xff"], "--regex is not valid Unicode text"),
        (base + ["--grammar", str(bad_regex)], "invalid Lark grammar: error: missing )"),
        (base + ["--grammar", str(latin1)], f"grammar file '{latin1}' is not UTF-8 text (byte 0xe9 at offset 11)"),
        (base + ["--grammar", str(imports)], "found no grammar file 'nosuchmod.lark'"),
        (base + ["--grammar", str(tmp / "missing.lark")], "cannot read grammar file"),
        (base + ["--json-schema", str(bad_json)], "is not valid JSON"),
        (base + ["--json-schema", str(latin_json)], "is not UTF-8 text"),
        (base + ["--regex", "a", "--model", "nosuch-org/nosuch-model"], "not in the Hugging Face cache"),
        (base + ["--regex", "a", "--model", str(empty)], "no config.json"),
        (base + ["--regex", "a", "--particles", "1000000"], "limit of 100,000 particles"),
        (base + ["--regex", "a", "--particles", "0"], "particles must be an integer >= 1"),
        (base + ["--regex", "a", "--particles", "many"], "invalid int value: 'many'"),
        (base + ["--regex", "a", "--seed", "-1"], "seed must be a non-negative integer"),
        (base + ["--regex", "a", "--max-tokens", "0"], "max_tokens must be an integer >= 1"),
        (base + ["--regex", "a", "--sampler", "fast"], "invalid choice: 'fast'"),
        (base + ["--regex", "a", "--grammar", "g.lark"], "not allowed with argument"),
        (["generate", "--regex", "a"], "the following arguments are required: --prompt"),
        ([], "the following arguments are required: command"),
    ] + ([] if __import__("importlib").util.find_spec("vllm") else [
        (base + ["--regex", "a", "--backend", "vllm"], "pip install 'smc-steer[vllm]'"),
    ])


def _cli_failure(argv, msg, code, err: str, out) -> tuple | None:
    lines = err.splitlines()
    if code != 2 or len(lines) != 1 or not lines[0].startswith("error: ") or msg not in lines[0] or out:
        return argv, code, lines[:5], out[:200]
    return None


def test_cli_bad_input_exits_2_with_one_line(tmp_path, capsys, monkeypatch):
    """Each bad input: exit status 2, one line on stderr that names it, nothing on stdout. Argv
    that is not text, and no argv at all, go through ``python -m smc`` in a process of its own
    (the interpreter decodes argv); the rest through ``main`` with argv decoded the same way."""
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}  # the probe decides
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    env["PYTHONPATH"] = str(ROOT)
    cases = _cli_cases(tmp_path)
    own_process = [(a, m) for a, m in cases if not a or any(isinstance(x, bytes) for x in a)]
    assert len(own_process) >= 3
    procs = [(argv, msg, subprocess.Popen(
        [sys.executable, "-m", "smc", *[a if isinstance(a, bytes) else os.fsencode(a) for a in argv]],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )) for argv, msg in own_process]
    failures = []
    for argv, msg in cases:
        if (argv, msg) not in own_process:
            code = cli_main([os.fsdecode(a) for a in argv])
            out, err = capsys.readouterr()
            failures.append(_cli_failure(argv, msg, code, err, out))
    for argv, msg, p in procs:
        out, err = p.communicate(timeout=300)
        failures.append(_cli_failure(argv, msg, p.returncode, err.decode("utf-8", "replace"), out))
    assert not [f for f in failures if f], failures


# --------------------------------------------------------------------------- memory budget
def _fake_state(ids) -> torch.Tensor:
    """A state that identifies its context, to check that every slot holds its own node's."""
    g = np.random.default_rng(abs(hash(tuple(ids))) % 2**32)
    return torch.tensor(g.standard_normal(6), dtype=torch.float32)


def _check_trie(t: KVTrie) -> None:
    live = list(t._iter_nodes())
    for node in live:
        chain, x = [], node
        while x.parent is not None:
            chain.append(x.slot)
            x = x.parent
        assert node.path.tolist() == chain[::-1]
        assert torch.equal(t.pool[node.slot], _fake_state(t._ids_of(node)))
    slots = [n.slot for n in live]
    assert len(set(slots)) == len(slots) == t.live_slots
    assert 0 not in slots and 0 not in t._free and not set(slots) & set(t._free)
    assert len(slots) + len(t._free) == t.pool.shape[0] - 1
    assert all(n.logprobs is not None for n in t._rows.values())


@pytest.mark.parametrize("budget", [0, 3_000, 5_000, 8_000, 20_000, 10**6])
def test_trie_stays_within_budget_and_consistent(budget, monkeypatch):
    """Random batches (shared prefixes, duplicates, long and short contexts): after every
    insert the accounted bytes, pool included, are within the budget and every cached state is
    where its node says; the pool is compacted when rows need room, and clear() gives it back."""
    compactions = []
    real = KVTrie._compact
    monkeypatch.setattr(KVTrie, "_compact", lambda self: compactions.append(1) or real(self))
    rng = np.random.default_rng(budget)
    t = KVTrie(6, torch.float32, "cpu", row_bytes=40, budget_bytes=budget)
    initial = t.pool.shape[0]
    ctxs = [tuple(rng.integers(0, 5, size=rng.integers(1, 4)).tolist()) for _ in range(4)]
    most_live = 0
    for _ in range(250):
        batch = []
        for _ in range(rng.integers(1, 5)):
            ids = ctxs[rng.integers(len(ctxs))] + tuple(rng.integers(0, 5, size=rng.integers(1, 3)).tolist())
            if rng.random() < 0.3:
                ctxs.append(ids)
            batch.append(ids)
        entries, states = [], []
        for ids in dict.fromkeys(batch):
            past = t.longest_prefix(ids, len(ids) - 1)
            entries.append((ids, past, ids[past.depth:], torch.full((3,), float(len(ids)))))
            states += [_fake_state(ids[: k + 1]) for k in range(past.depth, len(ids))]
        t.insert(entries, torch.stack(states))
        assert t.used_bytes <= budget
        most_live = max(most_live, t.live_slots)
        _check_trie(t)
        for ids, _, _, lp in entries:  # a cached row is the one stored for its context
            hit = t.cached_logprobs(ids)
            assert hit is None or torch.equal(hit, lp)
    if 3_000 <= budget <= 8_000:
        assert compactions  # small budgets exercise the compaction path
    if budget:
        assert most_live > 0  # something was cached
    if 0 < budget <= 20_000:
        assert t.evictions > 0
    t.clear()
    assert t.pool.shape[0] == initial and t.live_slots == 0 and not t._rows
    assert t.used_bytes == (initial - 1) * t.slot_cost


def test_interrupted_insert_forgets_everything():
    t = KVTrie(6, torch.float32, "cpu", row_bytes=40, budget_bytes=10**6)
    ids = (1, 2, 3)
    t.insert([(ids, t.root, ids, torch.zeros(3))], torch.stack([_fake_state(ids[:k + 1]) for k in range(3)]))
    assert t.cached_logprobs(ids) is not None

    with pytest.raises(RuntimeError):
        # states of the wrong size: the pool write fails half-way through the insert
        t.insert([((1, 2, 3, 4), t.longest_prefix((1, 2, 3, 4), 3), (4,), torch.zeros(3))], torch.zeros(1, 5))
    assert t.live_slots == 0 and t.cached_logprobs(ids) is None
    _check_trie(t)


@pytest.mark.slow
def test_embedded_lm_cache_within_budget_and_exact(embedded_lm):
    """Many short runs with a small budget: the pool never outgrows the budget, clear_cache()
    gives it back, and results equal those of a backend with the default (large) budget."""
    from smc.backends.hf import HFLM

    budget = 4 << 20
    small = HFLM(embedded_lm.model, embedded_lm.tokenizer, cache_budget_bytes=budget)
    large = HFLM(embedded_lm.model, embedded_lm.tokenizer)
    initial = small.trie.pool.numel() * small.trie.pool.element_size()
    for i in range(6):
        kw = dict(particles=3, max_tokens=4, seed=i, progress=False)
        a = smc.generate(f"Count to {i}:", Regex(r"[0-9 ,]+"), lm=small, **kw)
        b = smc.generate(f"Count to {i}:", Regex(r"[0-9 ,]+"), lm=large, **kw)
        assert [s.text for s in a.samples] == [s.text for s in b.samples]
        assert a.log_ml == pytest.approx(b.log_ml, abs=1e-4)
        pool_bytes = small.trie.pool.numel() * small.trie.pool.element_size()
        assert small.trie.used_bytes <= budget and pool_bytes <= budget
    assert small.trie.evictions > 0
    small.clear_cache()
    assert small.trie.pool.numel() * small.trie.pool.element_size() == initial


# --------------------------------------------------------------------------- files written
def _tree(root: Path) -> dict:
    """Every entry under ``root`` (links not followed): kind, and the bytes of regular files."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (
                "link:" + os.readlink(p) if p.is_symlink()
                else p.read_bytes() if p.is_file() and not stat.S_ISFIFO(st.st_mode)
                else stat.S_IFMT(st.st_mode))
    return out


def _unwritable_targets(tmp: Path) -> list[tuple[object, str]]:
    """Checkpoint paths that must be refused before any work, and their message. No real device
    or system file is ever a target: a FIFO, links and directories in ``tmp``; for 'cannot be
    written', a new file under /proc (nothing can be created there) and a missing directory."""
    os.mkfifo(tmp / "fifo")
    (tmp / "precious.txt").write_text("not a checkpoint")
    os.symlink(tmp / "precious.txt", tmp / "link")
    os.symlink(tmp / "nowhere", tmp / "dangling")
    (tmp / "dir").mkdir()
    return [
        (tmp / "fifo", "is not a regular file (a FIFO)"),
        (tmp / "link", "is a symbolic link"),
        (tmp / "dangling", "is a symbolic link"),
        (tmp / "dir", "is a directory"),
        (tmp / "precious.txt", "is not a smc-steer checkpoint"),
        ("/proc/smc-steer-cannot-be-here", "cannot be written"),
        (tmp / "missing" / "x.ckpt", "does not exist"),
    ]


def test_checkpoint_never_replaces_what_the_library_did_not_write(tmp_path):
    cases = _unwritable_targets(tmp_path)
    before = _tree(tmp_path)
    for path, msg in cases:
        lm = toy()
        for call in (lambda: smc.generate("", Regex("[12]+"), lm=lm, particles=2, max_tokens=3,
                                          checkpoint=path, progress=False),
                     lambda: smc.Request("", checkpoint=path),
                     lambda: smc.resume(path, lm=lm)):
            out = within(20, call)
            err = out.get("error")
            assert isinstance(err, smc.SmcSteerError) and isinstance(err, ValueError), (path, out)
            assert msg in str(err), (path, err)
            assert "\n" not in str(err)
        assert lm.stats["requests"] == 0  # refused before any work
    assert _tree(tmp_path) == before  # nothing changed, no temporary file left


def test_checkpoint_of_a_run_is_written_and_resumed_beside_other_files(tmp_path):
    (tmp_path / "empty.ckpt").write_bytes(b"")  # an empty file (e.g. from mkstemp) may be used
    lm = toy()
    kw = dict(lm=lm, particles=2, max_tokens=3, seed=0, progress=False)
    full = smc.generate("", Regex("[12]+"), **kw)
    smc.generate("", Regex("[12]+"), checkpoint=tmp_path / "empty.ckpt", **kw)
    assert sorted(os.listdir(tmp_path)) == ["empty.ckpt"]
    assert smc.resume(tmp_path / "empty.ckpt", lm=lm).log_ml == full.log_ml


# --------------------------------------------------------------------------- bounds
class _Forever(smc.Model):
    """A program whose step never finishes."""

    async def step(self):
        self.score(0.0)


def test_a_program_that_never_finishes_stops_at_the_default_step_limit():
    from smc.core import defaults

    with pytest.warns(RuntimeWarning, match=f"max_steps={defaults.MAX_STEPS} steps with 2 of 2"):
        out = within(120, lambda: asyncio.run(smc.smc(_Forever(), 2, progress=False)))
    r = out["result"]
    assert r.stats["steps"] == defaults.MAX_STEPS and r.stats["max_steps_reached"]
    assert r.log_ml == float("-inf") and not r.finished  # unfinished particles count as 0
    with pytest.warns(RuntimeWarning, match="max_steps=3 steps"):  # numpy ints too
        r = asyncio.run(smc.smc(_Forever(), 2, progress=False, max_steps=np.int64(3)))
    assert r.stats["steps"] == 3
    for search in (smc.beam(_Forever(), 2), smc.steer(_Forever(), 2, 1)):
        r = within(120, asyncio.run, search)["result"]
        assert r.stats["max_steps_reached"] and r.stats["steps"] == defaults.MAX_STEPS


def test_generate_is_never_cut_by_the_step_limit():
    lm = toy()
    for method in ("smc", "beam", "steer"):
        r = smc.generate("", Regex("[12a-]+"), lm=lm, particles=3, max_tokens=6, method=method, progress=False)
        assert not r.stats.get("max_steps_reached") and r.finished


def test_top_k_has_a_budget_reachable_from_generate_and_the_cli(tmp_path):
    from smc.core import defaults

    assert smc.Request("x", method="top_k").max_expansions == defaults.MAX_EXPANSIONS
    assert smc.Request("x").max_expansions is None  # only top_k reads it
    with pytest.raises(smc.SearchBudgetExceeded, match="max_expansions=3 particles before finding 3"):
        smc.generate("", Regex("[12]+"), lm=toy(), method="top_k", particles=3, max_tokens=6,
                     max_expansions=3, progress=False)
    r = smc.generate("", Regex("[12]+"), lm=toy(), method="top_k", particles=3, max_tokens=6,
                     max_expansions=np.int64(100), progress=False)
    assert len(r.finished) == 3 and r.stats["expansions"] <= 100
    for bad, exc, msg in [(dict(max_expansions=5), ValueError, "only used by method='top_k'"),
                          (dict(method="top_k", max_expansions=0), ValueError, "max_expansions must be"),
                          (dict(method="top_k", max_expansions=2.5), ValueError, "max_expansions must be")]:
        with pytest.raises(exc, match=msg):
            smc.Request("x", **bad)
    assert smc.Request.from_json({"prompt": "x", "method": "top_k", "max_expansions": 7}).max_expansions == 7
    cli = subprocess.run(
        [sys.executable, "-m", "smc", "generate", "--prompt", "x", "--regex", "[0-9]+",
         "--max-expansions", "5"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert cli.returncode == 2 and "only used by method='top_k'" in cli.stderr
    assert len(cli.stderr.strip().splitlines()) == 1


def _words(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    out: set[str] = set()
    while len(out) < n:
        out.add("".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), rng.integers(3, 11))))
    return sorted(out)


def test_a_word_list_stays_on_the_automaton():
    words = _words(20_000)
    out = within(120, Regex, "|".join(words))
    r = out["result"]
    assert r.dfa is not None and r.fallback_reason is None  # not the regex-package fallback
    for w in words[:50] + ["zz", "aaaaaaaaaaaaaaaaa"]:
        assert asyncio.run(r.complete(w.encode())) == (0.0 if w in words else float("-inf"))
    # a prefix of no word is dead at once
    assert asyncio.run(r.prefix(b"qqqqqqqqqqq")) == float("-inf")


def test_long_patterns_give_short_messages():
    for make, msg in [(lambda: Regex("(" + "a" * 5_000 + "){1000000}"), None),
                      (lambda: Grammar('start: /(ab){2000000}/'), "repeat counts")]:
        out = within(60, make)
        if "error" in out:
            assert len(str(out["error"])) < 400 and "\n" not in str(out["error"])
            assert msg is None or msg in str(out["error"])
    g = within(60, Grammar, 'start: "' + "a" * 100_000 + '"')["result"]  # a long literal is fine
    assert asyncio.run(g.complete(b"a" * 100_000)) == 0.0


# --------------------------------------------------------------------------- schemas that are not trees
_SELF_SCHEMA = """
import sys; sys.path.insert(0, {root!r})
from potentials import JSONSchema
import smc
s = {{"type": "object"}}; s["properties"] = {{"a": s}}
for make in (lambda: JSONSchema(s), lambda: smc.Request("x", {{"json_schema": s}})):
    try:
        make()
    except ValueError as e:
        print(type(e).__name__, e)
"""


def test_a_schema_that_contains_itself_is_one_clear_error():
    # in a subprocess with a memory-independent time bound: a regression must not hang the suite
    out = subprocess.run([sys.executable, "-c", _SELF_SCHEMA.format(root=str(ROOT))], capture_output=True,
                         text=True, timeout=60)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2, out.stderr[-2000:]
    assert lines[0].startswith("InvalidArgument schema is not a tree: the dict at properties/a contains itself")
    assert lines[1].startswith("InvalidArgument the constraint is not JSON")
    from potentials import JSONSchema

    shared = {"type": "integer"}
    assert JSONSchema({"anyOf": [shared, shared]}).schema  # a shared sub-object is not a cycle
    x = {"type": "integer"}
    for _ in range(60):  # a DAG that unfolds to 2^60 values
        x = {"anyOf": [x, x]}
    err = within(10, JSONSchema, x)["error"]
    assert isinstance(err, smc.InvalidArgument) and "too large" in str(err)


def test_json_schema_registry_as_a_dict():
    from potentials import JSONSchema

    j = JSONSchema({"$ref": "urn:x"}, registry={"urn:x": {"type": "integer"}})
    assert asyncio.run(j.complete(b"12")) == 0.0 and asyncio.run(j.complete(b'"a"')) == float("-inf")
    with pytest.raises(TypeError, match="registry must be a referencing.Registry or a dict"):
        JSONSchema({"$ref": "urn:x"}, registry=5)
    with pytest.raises(TypeError, match="registry must map URIs"):
        JSONSchema({"$ref": "urn:x"}, registry={"urn:x": 5})


# --------------------------------------------------------------------------- resume messages
def test_resume_with_another_lm_names_what_differs(tmp_path):
    def lm_of(vocab, eos):
        return smc.ToyLM(vocab, eos, lambda ids: [1 / len(vocab)] * len(vocab))

    path = tmp_path / "run.ckpt"
    smc.generate("", Regex("[12]+"), lm=lm_of(["1", "2", "$"], "$"), particles=2, max_tokens=3,
                 checkpoint=path, progress=False)
    for other, msg in [(lm_of(["1", "2", "3", "$"], "$"), "its vocabulary has 4 tokens, the run's had 3"),
                       (lm_of(["1", "3", "$"], "$"), "its vocabulary's tokens differ from the run's"),
                       (lm_of(["1", "2", "$"], "2"), "its EOS token ids [1] differ from the run's [2]")]:
        with pytest.raises(smc.CheckpointError, match=re.escape(msg)):
            smc.resume(path, lm=other, checkpoint=None)


def test_numpy_numbers_are_accepted_wherever_numbers_are():
    i = np.int64
    lm = toy()
    for case in [dict(max_tokens=i(4)), dict(particles=i(4), islands=np.int32(2)), dict(seed=np.uint8(3)),
                 dict(sampler_options={"max_checks": i(10), "early_fallback": i(3)}),
                 dict(ess_threshold=np.float32(0.5)), dict(method="steer", n_beam=i(2))]:
        req = smc.Request("", Regex("[12]+"), **case)
        json.dumps(req.to_json())  # plain numbers in the JSON form
        assert smc.generate(req, lm=lm).finished


# --------------------------------------------------------------------------- dead prefixes die
def test_dead_prefixes_of_deep_disjunctions_and_enum_escapes_die():
    from potentials import JSONSchema

    s = {"type": "integer"}
    for _ in range(40):  # far too wide to split into clauses: read by the branches' types
        s = {"anyOf": [s, {"type": "string"}]}
    j = JSONSchema(s)
    for dead in (b"{", b"[", b"t", b"n"):
        assert asyncio.run(j.prefix(dead)) == float("-inf"), dead
    assert asyncio.run(j.complete(b"12")) == 0.0 and asyncio.run(j.complete(b'"x"')) == 0.0
    e = JSONSchema({"enum": ["ab", "c\u0001d", "\u00e9", "\U0001F600"]})
    for dead in (b'"\\u007', b'"\\u000', b'"c\\u0002', b'"c\\u01'):
        assert asyncio.run(e.prefix(dead)) == float("-inf"), dead
    for text in (b'"\\u0061b"', b'"\\u00e9"', b'"\\ud83d\\ude00"', b'"c\\u0001d"'):
        assert asyncio.run(e.complete(text)) == 0.0, text
