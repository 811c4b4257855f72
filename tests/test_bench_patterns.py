"""benchmarks/bench_patterns.py's follow-up of the runs left without a finished sample: which
reruns it makes, what it records, and that the summary reads it back from a JSON-lines file."""

from __future__ import annotations

import asyncio
import json
import sys
from argparse import Namespace
from pathlib import Path

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
