"""The sharing rule for cloned particles, and snapshot/resume of runs (smc.engine.checkpoint).

The strongest check: a run killed (SIGKILL, in a child process) after some step and resumed
here returns exactly, bit for bit, the Result of the uninterrupted run with the same seed.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import smc
import smc.engine.checkpoint as ck
from smc.core import defaults
from tests.checkpoint_programs import CONSTRAINT, Words, make_lm
from potentials import JSONSchema, Predicate, Regex
from smc.engine.checkpoint import CheckpointError, read_header
from smc.programs.constrained import ConstrainedGeneration
from smc.programs.sharing import Shared, clone_state, is_shared

ROOT = Path(__file__).resolve().parents[3]
TESTS = Path(__file__).resolve().parents[2]


def same_result(a: smc.Result, b: smc.Result) -> None:
    """Samples, weights, log_ml and history equal bit for bit."""
    assert a.samples == b.samples
    assert [s.log_weight for s in a.samples] == [s.log_weight for s in b.samples]
    assert a.log_ml == b.log_ml or (math.isnan(a.log_ml) and math.isnan(b.log_ml))
    assert a.history == b.history
    assert a.stats["steps"] == b.stats["steps"] and a.stats["tokens"] == b.stats["tokens"]


def same_run_up_to_rounding(a: smc.Result, b: smc.Result, tol: float = 1e-6) -> None:
    """Texts, tokens, finished flags, resampling ancestors and history tokens equal; log weights,
    log_ml and ESS within ``tol``: a real model's log-probs for a context recomputed from a cold KV
    cache (one prefill) differ from the incrementally decoded ones by float rounding."""
    key = lambda r: [(s.text, s.token_ids, s.finished) for s in r.samples]  # noqa: E731
    assert key(a) == key(b)
    assert [s.log_weight for s in a.samples] == pytest.approx([s.log_weight for s in b.samples], abs=tol)
    assert a.log_ml == pytest.approx(b.log_ml, abs=tol)
    assert len(a.history) == len(b.history)
    for x, y in zip(a.history, b.history):
        assert (x.step, x.active, x.tokens, x.finished, x.ancestors) == (y.step, y.active, y.tokens, y.finished, y.ancestors)
        assert x.log_weights == pytest.approx(y.log_weights, abs=tol) and x.ess == pytest.approx(y.ess, abs=tol)
    assert a.stats["steps"] == b.stats["steps"] and a.stats["tokens"] == b.stats["tokens"]


@pytest.fixture
def step_files(monkeypatch, tmp_path):
    """Keeps a copy of the checkpoint written after each step: {step: path}."""
    kept: dict[int, Path] = {}
    real = ck.atomic_write

    def keep(path, data):
        real(path, data)
        step = read_header(path)["step"]
        kept[step] = tmp_path / f"step{step}.ckpt"
        kept[step].write_bytes(data)

    monkeypatch.setattr(ck, "atomic_write", keep)
    return kept


# ---------------------------------------------------------------------------- sharing rule
class Table:
    shared_by_particles = True


class DuckLM:
    """An LM by the protocol only (not an AsyncLM): shared all the same."""

    vocab = [b"a", b"<e>"]
    eos_token_ids = [1]

    def encode(self, text):
        return [0] * len(text)

    async def next_token_logprobs(self, ids):
        return np.log([0.5, 0.5])

    async def batch_next_token_logprobs(self, batch):
        return np.log([[0.5, 0.5]] * len(batch))


def test_clone_shares_exactly_what_the_rule_declares():
    lm, table, duck = make_lm(), Table(), DuckLM()
    box = Shared(cache={})
    deep = [[[[[[[[[[table]]]]]]]]]]  # deeper than engine.reachable's bound
    state = {"lm": lm, "box": box, "duck": duck, "deep": deep, "potential": CONSTRAINT,
             "tokens": [1, 2], "arr": np.arange(3), "pair": (table, [0])}
    c = clone_state(state)
    assert c["lm"] is lm and c["box"] is box and c["duck"] is duck and c["potential"] is CONSTRAINT
    assert c["deep"] is not deep and c["deep"][0][0][0][0][0][0][0][0][0][0] is table
    assert c["pair"][0] is table and c["pair"][1] is not state["pair"][1]
    assert c["tokens"] == [1, 2] and c["tokens"] is not state["tokens"]
    assert c["arr"] is not state["arr"] and list(c["arr"]) == [0, 1, 2]
    assert all(is_shared(x) for x in (lm, table, duck, box, CONSTRAINT))
    assert not any(is_shared(x) for x in ({}, [], np.arange(2), Words(lm, CONSTRAINT, 3)))


def test_clone_keeps_aliasing_and_cycles_within_a_particle():
    m = Words(make_lm(), CONSTRAINT, 4)
    m.alias = m.bonuses
    m.me = m
    c = m.clone()
    assert c.alias is c.bonuses and c.bonuses is not m.bonuses and c.me is c
    assert c.context is not m.context and c.context.lm is m.context.lm
    assert c.context._samplers is m.context._samplers  # samplers built once, for all particles


def test_objects_with_their_own_copy_protocol_keep_shared_members():
    class Slots:
        __slots__ = ("lm", "xs")

    s = Slots()
    s.lm, s.xs = make_lm(), [1]
    c = clone_state({"s": s})["s"]
    assert c is not s and c.lm is s.lm and c.xs == [1] and c.xs is not s.xs


class Counts(dict):
    pass


class Items(list):
    def __init__(self, xs):
        super().__init__(xs)
        self.note = [make_lm()]


def test_subclasses_of_containers_are_copied_whole():
    lm = make_lm()
    state = [Counts(a=[1], lm=lm), Items([lm, [2]])]
    c = clone_state(state)
    assert type(c[0]) is Counts and c[0] == {"a": [1], "lm": lm} and c[0]["lm"] is lm
    assert type(c[1]) is Items and c[1][0] is lm and c[1][1] == [2]
    assert c[1].note is not state[1].note and c[1].note[0] is state[1].note[0]


def test_old_module_paths_warn_and_give_the_same_objects():
    import importlib

    import smc.backends.loading
    import smc.programs.sharing

    old = importlib.import_module("smc.model")  # a module of smc-steer 0.1, split since
    with pytest.warns(DeprecationWarning, match="import is_shared from smc.programs.sharing"):
        is_shared = old.is_shared
    assert is_shared is smc.programs.sharing.is_shared and is_shared(CONSTRAINT)
    with pytest.warns(DeprecationWarning, match="smc.model.lift is now potentials.lift.as_token_potential"):
        assert old.lift is importlib.import_module("potentials.lift").as_token_potential
    sys.modules.pop("smc.loading", None)  # the warning comes with the first import
    with pytest.warns(DeprecationWarning, match="smc.loading is deprecated"):
        moved_whole = importlib.import_module("smc.loading")
    assert moved_whole is smc.backends.loading


def test_samplers_are_shared_by_the_rule_not_by_deepcopy_overrides():
    from samplers.base import TokenSampler

    assert "__deepcopy__" not in vars(TokenSampler) and "__deepcopy__" not in vars(Shared)
    assert "clone" not in vars(ConstrainedGeneration)


# ---------------------------------------------------------------------------- resume, in-process
@pytest.mark.parametrize("sampler,share", [("awrs", 0.0), ("direct", 0.0), ("awrs", 0.4)])
def test_generate_resumed_after_every_step_equals_the_uninterrupted_run(sampler, share, tmp_path, step_files):
    lm = make_lm()
    kw = dict(lm=lm, particles=6, max_tokens=7, seed=11, sampler=sampler, ess_threshold=1.0, progress=False,
              finish_share=share)
    full = smc.generate("", CONSTRAINT, **kw)
    assert (full.stats["banked"] > 0) == (share > 0)  # the banked copies are checkpointed too
    path = tmp_path / "run.ckpt"
    assert smc.generate("", CONSTRAINT, checkpoint=path, **kw).samples == full.samples
    assert sorted(step_files) == list(range(len(full.history) + 1))  # after start, then every step
    assert full.stats["resampling_events"] > 0
    for step, f in step_files.items():
        r = smc.resume(f, lm=make_lm(), checkpoint=None)  # a fresh LM object: nothing carried over
        same_result(r, full)
        assert r.stats["sampler"] == sampler and r.stats["max_tokens"] == 7


def test_generate_with_lookahead_resumed_after_every_step(tmp_path, step_files):
    """The lookahead rate is part of the checkpoint: resume rebuilds the twisted potential."""
    copy = Regex(r"([abc]+) \1")  # a copy language: the twist is active
    kw = dict(lm=make_lm(), particles=6, max_tokens=7, seed=4, ess_threshold=1.0, progress=False,
              lookahead=0.7)
    full = smc.generate("", copy, **kw)
    assert full.finished
    assert smc.generate("", copy, checkpoint=tmp_path / "run.ckpt", **kw).samples == full.samples
    for step, f in step_files.items():
        same_result(smc.resume(f, lm=make_lm(), checkpoint=None), full)
    plain = smc.generate("", copy, **{**kw, "lookahead": 0.0})
    assert plain.samples != full.samples  # so the rebuilt twist is what made them equal


async def test_program_with_critic_resumed_after_every_step(tmp_path, step_files):
    lm = make_lm()

    def critic(p):  # a twist from the particle's state
        return 0.1 * len(p.context.tokens)

    kw = dict(particles=8, seed=4, ess_threshold=0.9, critic=critic, progress=False)
    full = await smc.smc(Words(lm, CONSTRAINT, 8), **kw)
    await smc.smc(Words(lm, CONSTRAINT, 8), checkpoint=tmp_path / "w.ckpt", **kw)
    assert read_header(tmp_path / "w.ckpt")["shared"].keys() == {"context.lm", "constraint"}
    assert len(step_files) == len(full.history) + 1 >= 4
    for step, f in step_files.items():
        r = await smc.aresume(f, lm=make_lm(), shared={"constraint": CONSTRAINT}, critic=critic, checkpoint=None)
        same_result(r, full)


async def test_a_programs_samplers_come_back_with_the_masks_they_kept(tmp_path, step_files):
    """An LMContext's samplers are not stored but rebuilt on resume; the masks their lifted
    constraint kept (on which AWRS's steps depend) come back with them, in the same order."""
    model = Words(make_lm(), CONSTRAINT, 8)
    await smc.smc(model, 8, seed=4, ess_threshold=0.9, progress=False, checkpoint=tmp_path / "w.ckpt")
    (_, original), = model.context._samplers.values()  # the one sampler, shared by every particle
    kept = original.cache_contexts()
    assert kept["potential"]["masks"]  # the run kept some
    run, _, _ = ck.load(step_files[max(step_files)], lm=make_lm(), shared={"constraint": CONSTRAINT},
                        has_critic=False)
    rebuilt = run.pop[0].context._samplers
    assert not rebuilt and rebuilt.saved_caches  # nothing built yet; the caches wait to be refilled
    await run.restore_caches()
    assert rebuilt.sampler(CONSTRAINT, "awrs").cache_contexts() == kept and not rebuilt.saved_caches


async def test_resume_keeps_writing_the_checkpoint(tmp_path, step_files):
    lm = make_lm()
    full = await smc.smc(Words(lm, CONSTRAINT, 6), 4, seed=2, progress=False)
    await smc.smc(Words(lm, CONSTRAINT, 6), 4, seed=2, progress=False, checkpoint=tmp_path / "a.ckpt")
    mid = tmp_path / "mid.ckpt"
    mid.write_bytes(step_files[2].read_bytes())
    r = await smc.aresume(mid, lm=lm, shared={"constraint": CONSTRAINT})
    same_result(r, full)
    assert read_header(mid)["step"] == len(full.history)
    same_result(await smc.aresume(mid, lm=lm, shared={"constraint": CONSTRAINT}, checkpoint=None), full)


def test_json_schema_constraint_is_stored(tmp_path):
    vocab = ["0", "1", "12", "<e>"]
    lm = smc.ToyLM(vocab, "<e>", lambda ids: [0.3, 0.3, 0.2, 0.2])
    schema = JSONSchema({"type": "integer", "maximum": 120})
    kw = dict(lm=lm, particles=4, max_tokens=4, seed=0, progress=False)
    full = smc.generate("", schema, **kw)
    smc.generate("", schema, checkpoint=tmp_path / "j.ckpt", **kw)
    same_result(smc.resume(tmp_path / "j.ckpt", lm=lm), full)


# ---------------------------------------------------------------------------- resume after SIGKILL
CHILD = textwrap.dedent("""
    import asyncio, sys
    sys.path[:0] = [{root!r}, {tests!r}]
    import smc
    from tests.checkpoint_programs import CONSTRAINT, Words, make_lm
    model = Words(make_lm(delay={delay}), CONSTRAINT, 10)
    asyncio.run(smc.smc(model, 8, seed=7, ess_threshold=0.9, progress=False, checkpoint={path!r}))
""")


def kill_after(child: subprocess.Popen, path: Path, step: int, timeout: float = 120.0) -> int:
    """SIGKILL ``child`` once the checkpoint at ``path`` records ``step`` steps; the step it had."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and child.poll() is None:
        if path.exists() and read_header(path)["step"] >= step:
            break
        time.sleep(0.005)
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    assert child.returncode == -signal.SIGKILL, child.stderr.read().decode()[-2000:]
    return read_header(path)["step"]


async def test_program_killed_in_a_child_process_resumes_exactly(tmp_path):
    full = await smc.smc(Words(make_lm(), CONSTRAINT, 10), 8, seed=7, ess_threshold=0.9, progress=False)
    path = tmp_path / "killed.ckpt"
    code = CHILD.format(root=str(ROOT), tests=str(TESTS), delay=0.02, path=str(path))
    child = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stderr=subprocess.PIPE)
    k = kill_after(child, path, 3)
    assert 3 <= k < len(full.history), "the child must be killed mid-run"
    r = await smc.aresume(path, lm=make_lm(), shared={"constraint": CONSTRAINT})
    same_result(r, full)
    assert r.stats["lm_requests"] < full.stats["lm_requests"]  # only the resumed part ran here


GENERATE_CHILD = textwrap.dedent("""
    import os, signal, sys
    sys.path[:0] = [{root!r}]
    import smc, smc.engine.checkpoint as ck
    from potentials import Regex
    real = ck.atomic_write
    def write_then_die(path, data):  # the process dies right after step {k} is on disk
        real(path, data)
        if ck.read_header(path)["step"] == {k}:
            os.kill(os.getpid(), signal.SIGKILL)
    ck.atomic_write = write_then_die
    smc.generate({prompt!r}, Regex({pattern!r}), lm=smc.load_lm(), checkpoint={path!r}, **{kw!r})
""")


@pytest.mark.slow
def test_generate_on_the_embedded_model_killed_and_resumed(embedded_lm, tmp_path):
    prompt, pattern = "Give me a number.", r"[0-9]{1,3}( [a-z]+)?"
    kw = dict(particles=3, max_tokens=8, seed=0, ess_threshold=0.9, progress=False)
    # the full run starts from an empty cache, as the child does: rows that other tests' prompts
    # left cached differ from fresh ones by float rounding (up to 8e-6 in a step's log weights)
    embedded_lm.clear_cache()
    full = smc.generate(prompt, Regex(pattern), lm=embedded_lm, **kw)
    assert len(full.history) >= 4
    path = tmp_path / "gen.ckpt"
    code = GENERATE_CHILD.format(root=str(ROOT), k=2, prompt=prompt, pattern=pattern, path=str(path), kw=kw)
    child = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=300)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
    assert read_header(path)["step"] == 2
    same_run_up_to_rounding(smc.resume(path, lm=embedded_lm, checkpoint=None), full)


# ---------------------------------------------------------------------------- clear errors
def write_run(tmp_path: Path) -> Path:
    path = tmp_path / "r.ckpt"
    smc.generate("", CONSTRAINT, lm=make_lm(), particles=3, max_tokens=3, seed=0, progress=False, checkpoint=path)
    return path


def test_not_a_checkpoint_corrupt_truncated_or_missing(tmp_path):
    path = write_run(tmp_path)
    other = tmp_path / "other.bin"
    other.write_bytes(b"\x80\x04hello")
    with pytest.raises(CheckpointError, match="not a smc-steer checkpoint"):
        smc.resume(other, lm=make_lm())
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    (tmp_path / "flip.ckpt").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupt.*checksum"):
        smc.resume(tmp_path / "flip.ckpt", lm=make_lm())
    (tmp_path / "cut.ckpt").write_bytes(path.read_bytes()[:-5])
    with pytest.raises(CheckpointError, match="corrupt.*truncated"):
        smc.resume(tmp_path / "cut.ckpt", lm=make_lm())
    (tmp_path / "head.ckpt").write_bytes(ck.MAGIC + b"{not json\n")
    with pytest.raises(CheckpointError, match="corrupt.*header"):
        smc.resume(tmp_path / "head.ckpt", lm=make_lm())
    with pytest.raises(FileNotFoundError, match="no checkpoint file"):
        smc.resume(tmp_path / "none.ckpt", lm=make_lm())


@pytest.mark.parametrize("field,value", [("format_version", 0), ("smc_steer", "0.0.1")])
def test_checkpoint_of_another_version_is_refused(tmp_path, field, value):
    path = write_run(tmp_path)
    raw = path.read_bytes()[len(ck.MAGIC):]
    line, rest = raw.split(b"\n", 1)
    header = json.loads(line)
    header[field] = value
    path.write_bytes(ck.MAGIC + json.dumps(header).encode() + b"\n" + rest)
    with pytest.raises(CheckpointError, match=r"written by smc-steer .*resumes only its own"):
        smc.resume(path, lm=make_lm())


class WithFunction(Words):
    def __init__(self, *a):
        super().__init__(*a)
        self.notes = {"scorer": lambda text: len(text)}


async def test_unpicklable_program_is_refused_before_any_step_naming_the_attribute(tmp_path):
    lm = make_lm()
    with pytest.raises(CheckpointError, match=r"attribute self\.notes\['scorer'\] \(function\) cannot be pickled"):
        await smc.smc(WithFunction(lm, CONSTRAINT, 4), 3, progress=False, checkpoint=tmp_path / "f.ckpt")
    assert lm.stats["requests"] == 0


async def test_resume_names_missing_extra_and_mismatched_shared_objects(tmp_path):
    lm = make_lm()
    path = tmp_path / "w.ckpt"
    with pytest.warns(RuntimeWarning, match="stopped after max_steps=2 steps"):
        await smc.smc(Words(lm, CONSTRAINT, 6), 3, seed=1, progress=False, checkpoint=path, max_steps=2)
    with pytest.raises(CheckpointError, match=r"shared=\{'constraint': <potentials\..*Regex>\}"):
        await smc.aresume(path, lm=lm)
    with pytest.raises(CheckpointError, match=r"pass lm=\.\.\."):
        await smc.aresume(path, shared={"constraint": CONSTRAINT})
    with pytest.raises(CheckpointError, match=r"'constrain' .*not in the checkpoint"):
        await smc.aresume(path, lm=lm, shared={"constrain": CONSTRAINT})
    other = smc.ToyLM(["x", "<e>"], "<e>", lambda ids: [0.5, 0.5])
    with pytest.raises(CheckpointError, match=r"not the run's: its vocabulary has 2 tokens, the run's had 6"):
        await smc.aresume(path, lm=other, shared={"constraint": CONSTRAINT})
    with pytest.raises(CheckpointError, match="had no critic"):
        await smc.aresume(path, lm=lm, shared={"constraint": CONSTRAINT}, critic=lambda p: 0.0)


def test_bad_checkpoint_path_and_unpicklable_constraint(tmp_path):
    with pytest.raises(ValueError, match="directory .* does not exist"):  # before loading a model
        smc.generate("", CONSTRAINT, particles=2, max_tokens=2, checkpoint=tmp_path / "no" / "x")
    with pytest.raises(ValueError, match="directory .* does not exist"):
        smc.generate("", CONSTRAINT, lm=make_lm(), particles=2, max_tokens=2, checkpoint=tmp_path / "no" / "x")
    with pytest.raises(TypeError, match="checkpoint must be a file path"):
        smc.generate("", CONSTRAINT, lm=make_lm(), particles=2, max_tokens=2, checkpoint=3)
    local = Predicate(lambda text: True)
    with pytest.raises(CheckpointError, match=r"constraint \(Predicate\) cannot be pickled"):
        smc.generate("", local, lm=make_lm(), particles=2, max_tokens=2, checkpoint=tmp_path / "p")


def test_a_killed_write_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = write_run(tmp_path)
    before = path.read_bytes()

    def crash(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    run = ck.Run([], np.random.default_rng(0), read_header(path)["settings"])
    with pytest.raises(KeyboardInterrupt):
        ck.CheckpointWriter(path).write(run, 0.0)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


async def test_a_program_class_pickle_cannot_name_is_refused(tmp_path):
    class Local(Words):  # defined in a function: pickle cannot import it again
        pass

    with pytest.raises(CheckpointError, match=r"particle 0 \(.*Local\) cannot be pickled.*module level"):
        await smc.smc(Local(make_lm(), CONSTRAINT, 3), 2, progress=False, checkpoint=tmp_path / "l.ckpt")


def test_generate_with_the_default_budget_twist_resumed_after_every_step(tmp_path, step_files):
    """A generate run under a JSON Schema in one population has the budget twist as its critic
    (Request.per_byte) and resamples by the weights to a power (Request.resampling_power);
    resume rebuilds the critic from the stored request, with no critic passed, and reads the
    power from the run's settings.
    Here AWRS's step 3 is exact for particles whose state's mask steps 1-2 kept: resume
    computes the kept masks again from the checkpoint's contexts (``cache_contexts``), and
    without that the resumed run took a rejection step there and its weights differed."""
    from tests.smc.api.batch_toys import toy

    schema = JSONSchema({"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]})
    kw = dict(lm=toy(), particles=4, max_tokens=10, seed=3, ess_threshold=1.0, progress=False, chat=False)
    full = smc.generate("", schema, **kw)
    assert smc.generate("", schema, checkpoint=tmp_path / "run.ckpt", **kw).samples == full.samples
    assert read_header(tmp_path / "run.ckpt")["program"]["request"]["per_byte"] > 0
    assert read_header(tmp_path / "run.ckpt")["program"]["request"]["resampling_power"] == defaults.RESAMPLING_POWER < 1
    for step, f in step_files.items():
        same_result(smc.resume(f, lm=toy(), checkpoint=None), full)
