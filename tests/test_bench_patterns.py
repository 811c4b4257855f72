"""benchmarks/bench_patterns.py: genlm-eval's prompt, the seeded selection, the follow-up of the
runs left without a finished sample, the comparison with a peer and its failure classes, the
peer process's restarts (with a stand-in runner), and the quick form on the embedded model
(smc-steer always; genlm-control only where its venv was built)."""

from __future__ import annotations

import asyncio
import json
import sys
from argparse import Namespace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_patterns as bp  # noqa: E402

PATTERN = r"(\w+(\d+))\1"


def _args(**kw) -> Namespace:
    base = dict(seed=0, particles=5, followup_seeds=4, followup_particles=50, timeout=60.0)
    base.update(kw)
    return Namespace(**base)


def test_best_text_is_the_matching_text_of_most_mass():
    rec = {"pattern": PATTERN, "posterior": {"a1b2": 0.6, "a1a1": 0.3, "7777": 0.1}}
    assert bp.best_text(rec) == "a1a1"  # "a1b2" has more mass but does not match
    assert bp.best_text({"pattern": PATTERN, "posterior": {"abc": 1.0}}) is None
    assert bp.best_text({"pattern": PATTERN, "status": "timeout"}) is None


def test_follow_up_reruns_other_seeds_and_a_larger_population(monkeypatch, capsys, tmp_path):
    calls = []

    async def fake_run_one(pattern, lm, args, seed=None, particles=None):
        calls.append((seed, particles))
        if particles is not None:  # the larger population finds an answer
            return {"pattern": pattern, "status": "ok", "posterior": {"1111": 1.0}}
        if seed == 2:
            return {"pattern": pattern, "status": "ok", "posterior": {"123123": 0.9, "12312": 0.1}}
        if seed == 3:  # finished, but nothing that matches: not a found answer
            return {"pattern": pattern, "status": "ok", "posterior": {"zz": 1.0}}
        return {"pattern": pattern, "status": "no_sample", "posterior": {}}

    monkeypatch.setattr(bp, "run_one", fake_run_one)
    rec = {"pattern": PATTERN, "status": "no_sample", "seconds": 1.0, "score": 0.0,
           "mode": "fallback", "reason": "backreference", "texts": ["2aab"]}
    rec["followup"] = asyncio.run(bp.follow_up(rec, None, _args()))
    # seeds 1..4 at the run's N, then the run's seed with M particles
    assert calls == [(1, None), (2, None), (3, None), (4, None), (None, 50)]
    assert rec["followup"] == {"seeds": 4, "found_at": [2], "texts": ["123123"], "particles": 50,
                               "large": "1111", "large_status": "ok"}

    # the summary prints the follow-up, also when read back from a --jsonl file
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    bp.summarize([json.loads(line) for line in path.read_text().splitlines()], 60.0)
    out = capsys.readouterr().out
    assert "follow-up of the 1 runs with no finished sample: 1 reach a matching sample" in out
    assert "a sample at 1 of 4 other seeds ['123123']" in out and "N=50: '1111'" in out


def test_follow_up_that_finds_nothing_says_so(monkeypatch, capsys):
    async def never(pattern, lm, args, seed=None, particles=None):
        return {"pattern": pattern, "status": "no_sample", "posterior": {}}

    monkeypatch.setattr(bp, "run_one", never)
    rec = {"pattern": PATTERN, "status": "no_sample", "seconds": 1.0, "score": 0.0}
    rec["followup"] = asyncio.run(bp.follow_up(rec, None, _args(followup_seeds=2)))
    assert rec["followup"]["found_at"] == [] and rec["followup"]["large"] is None
    bp.summarize([rec], 60.0)
    assert "0 reach a matching sample" in capsys.readouterr().out


# ---------------------------------------------------------------------------- the prompt
def test_prompt_is_genlm_evals_plain_text_form():
    # genlm-eval's default_prompt_formatter(use_chat_format=False): system prompt, the pairs as
    # "Pattern:"/"Output:" lines, then the pattern itself on the last line
    assert bp.prompt_for("[0-9]{2}") == (
        "You are a helpful assistant that generates strings matching regular expressions. "
        "Only output the exact string that matches the regex pattern, nothing more.\n"
        "Pattern: (ab)+\nOutput: ab\nPattern: (ab|cd)+\nOutput: cd\n"
        "Pattern: [a-z]+\nOutput: hello\n[0-9]{2}")


def test_prompt_ids_are_the_tokenizer_alone_even_with_a_chat_template():
    from smc.backends.toy import ToyLM

    vocab = [bytes((b,)) for b in range(32, 127)] + [b"\n", b"<eos>"]
    lm = ToyLM(vocab, b"<eos>", lambda ids: [1 / len(vocab)] * len(vocab),
               chat_template=lambda msgs: "<chat>" + msgs[-1]["content"])
    ids = bp.prompt_ids(lm, "a+")
    assert b"".join(vocab[i] for i in ids) == bp.prompt_for("a+").encode()


# ---------------------------------------------------------------------------- the selection
def test_sample_is_seeded_and_any_prefix_is_a_sample():
    pats = [f"p{i}" for i in range(50)]
    a = bp.select(pats, Namespace(stride=1, limit=None, sample=10, sample_seed=3))
    b = bp.select(pats, Namespace(stride=1, limit=None, sample=10, sample_seed=3))
    assert a == b and len(set(a)) == 10 and all(pats[i] == p for i, p in a)
    assert a != sorted(a)  # the drawn order, not the corpus order
    full = bp.select(pats, Namespace(stride=1, limit=None, sample=500, sample_seed=3))
    assert sorted(full) == list(enumerate(pats))
    assert bp.select(pats, Namespace(stride=5, limit=3, sample=None, sample_seed=0)) == [
        (0, "p0"), (5, "p5"), (10, "p10")]


# ---------------------------------------------------------------------------- the comparison
def _rec(engine, pattern, status, score, **kw):
    return {"engine": engine, "pattern": pattern, "status": status, "score": score,
            "seconds": 1.0, **kw}


def test_failure_classes_list_where_smc_steer_fails_and_the_peer_matches():
    ours = {"a": _rec("smc-steer", "a", "ok", 1.0, posterior={"a": 1.0}),
            "b+": _rec("smc-steer", "b+", "no_sample", 0.0, mode="fallback",
                       reason="backreference \\1", texts=["bbx"]),
            "c": _rec("smc-steer", "c", "timeout", 0.0, mode="automaton"),
            "d": _rec("smc-steer", "d", "compile_error", 0.0, error="RegexTooLarge: big"),
            "e": _rec("smc-steer", "e", "no_sample", 0.0)}
    peer = {"a": _rec("genlm-control", "a", "ok", 1.0, posterior={"a": 1.0}),
            "b+": _rec("genlm-control", "b+", "ok", 0.5, posterior={"bb": 0.5, "zz": 0.5}),
            "c": _rec("genlm-control", "c", "ok", 1.0, posterior={"c": 1.0}),
            "d": _rec("genlm-control", "d", "ok", 1.0, posterior={"d": 1.0}),
            # finished, but nothing that matches: not a success of the peer
            "e": _rec("genlm-control", "e", "ok", 0.0, posterior={"x": 1.0})}
    got = {f["pattern"]: f for f in bp.failure_classes(ours, peer)}
    assert sorted(got) == ["b+", "c", "d"]
    assert got["b+"]["status"] == "no_sample" and "backreference" in got["b+"]["reason"]
    assert got["b+"]["peer_text"] == "bb"
    assert got["c"]["reason"] == "timeout (automaton)"
    assert got["d"]["reason"] == "RegexTooLarge: big"


def test_summary_compares_engines_on_the_patterns_both_ran(capsys):
    recs = [_rec("smc-steer", "a", "ok", 1.0, posterior={"a": 1.0}, mode="automaton"),
            _rec("smc-steer", "b", "no_sample", 0.0, mode="automaton"),
            _rec("smc-steer", "only-ours", "ok", 1.0, posterior={"only-ours": 1.0}),
            _rec("genlm-control", "a", "ok", 0.5, posterior={"a": 0.5, "x": 0.5}),
            _rec("genlm-control", "b", "ok", 1.0, posterior={"b": 1.0})]
    bp.summarize(recs, 60.0)
    out = capsys.readouterr().out
    assert "== smc-steer against genlm-control on the 2 patterns both ran" in out
    assert "| smc-steer | 0.500 | 1 | 0 | 0 | 0 | 1.00 | 1.00 |" in out
    assert "| genlm-control | 0.750 | 0 | 0 | 0 | 0 | 1.00 | 1.00 |" in out
    assert "smc-steer higher on 1, genlm-control higher on 1, equal on 0" in out
    assert "smc-steer fails where genlm-control finds a match: 1" in out
    # the peer's records are counted per class by smc-steer's compile of the same pattern
    peer_part = out.split("== genlm-control")[1].split("== smc-steer against")[0]
    assert "automaton                   2" in peer_part


# ---------------------------------------------------------------------------- the peer process
FAKE_RUNNER = '''
import argparse, json, sys, time
ap = argparse.ArgumentParser()
ap.add_argument("--mode"); ap.add_argument("--tasks-file"); ap.add_argument("--out")
a = ap.parse_args()
for line in open(a.tasks_file):
    t = json.loads(line)
    if t["pattern"] == "HANG":
        time.sleep(600)
    if t["pattern"] == "DIE":
        sys.exit(3)
    with open(a.out, "a") as f:
        f.write(json.dumps({"engine": "genlm-control", "task_id": t["task_id"],
                            "pattern": t["pattern"], "status": "ok", "seconds": 0.1,
                            "posterior": {t["pattern"]: 1.0}}) + "\\n")
'''


def test_peer_runner_is_restarted_after_a_stuck_or_dead_pattern(tmp_path, monkeypatch):
    script = tmp_path / "runner.py"
    script.write_text(FAKE_RUNNER)
    monkeypatch.setattr(bp, "PEER_PYTHON", Path(sys.executable))
    monkeypatch.setattr(bp, "PEER_SCRIPT", script)
    tasks = [{"task_id": i, "pattern": p} for i, p in enumerate(["a", "HANG", "b", "DIE", "c"])]
    seen = []
    got = bp.run_peer(tasks, timeout=1.0, on_record=seen.append, grace=1.0)
    assert [r["task_id"] for r in got] == [0, 1, 2, 3, 4] and seen == got
    assert [r["status"] for r in got] == ["ok", "timeout", "ok", "crash", "ok"]
    assert "killed" in got[1]["error"] and "exited with 3" in got[3]["error"]


# ---------------------------------------------------------------------------- the quick form
def _quick(tmp_path: Path, engines: str) -> tuple[list[dict], str]:
    import subprocess

    out = tmp_path / "runs.jsonl"
    proc = subprocess.run(
        [sys.executable, str(Path(bp.__file__)), "--engines", engines, "--newline-eos",
         "--pattern", "ab+", "--pattern", "[0-9]{2}", "--max-tokens", "8", "--jsonl", str(out)],
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(ln) for ln in out.read_text().splitlines()], proc.stdout


@pytest.mark.slow
def test_quick_form_runs_smc_steer_on_the_embedded_model(tmp_path):
    recs, stdout = _quick(tmp_path, "smc-steer")
    assert [(r["engine"], r["pattern"]) for r in recs] == [("smc-steer", "ab+"), ("smc-steer", "[0-9]{2}")]
    for r in recs:
        assert r["status"] == "ok" and r["score"] == pytest.approx(1.0)
        assert all(bp.score(r["pattern"], {t: 1.0}) == 1.0 for t in r["posterior"])
    assert "weighted accuracy 1.000" in stdout


@pytest.mark.slow
@pytest.mark.skipif(not bp.PEER_PYTHON.is_file(),
                    reason="genlm-control's venv (.venv-peers/genlm-control) is not built; "
                           "benchmarks/peers/genlm_control.py says how")
def test_quick_form_runs_genlm_control_beside_smc_steer(tmp_path):
    recs, stdout = _quick(tmp_path, "smc-steer,genlm-control")
    peer = [r for r in recs if r["engine"] == "genlm-control"]
    assert [r["pattern"] for r in peer] == ["ab+", "[0-9]{2}"]
    for r in peer:
        assert r["status"] in ("ok", "no_sample") and r["versions"]["genlm-control"] == "0.4.1"
        if r["status"] == "ok":  # the peer's potential admits matching texts only
            assert r["score"] == pytest.approx(1.0) and r["log_ml"] > float("-inf")
    assert "== smc-steer against genlm-control on the 2 patterns both ran" in stdout
