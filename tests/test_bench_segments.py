"""benchmarks/bench_segments.py: its task families (seeded, distinct, each gold output accepted
by its constraint and scored correct), the paired summary, and a tiny run on the embedded model."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_segments as bs  # noqa: E402

FAMILIES = {"think_json": lambda: list(bs.think_tasks()),
            "tool_call": lambda: list(bs.tool_tasks())}


@pytest.mark.parametrize("family", FAMILIES)
def test_tasks_are_seeded_distinct_and_their_gold_outputs_pass(family):
    tasks = FAMILIES[family]()
    assert len(tasks) >= 30
    assert len({t.id for t in tasks}) == len(tasks)
    assert [t.id for t in tasks] == [t.id for t in FAMILIES[family]()]

    async def accepted(text):
        return [await t.constraint.complete(text(t).encode()) for t in tasks]

    assert asyncio.run(accepted(lambda t: t.gold)) == [0.0] * len(tasks)
    assert all(t.correct(t.gold) == 1.0 and t.name_ok(t.gold) == 1.0 for t in tasks)
    # another task's gold is wrong here, unless the two share the answer
    shifted = [(t, u) for t, u in zip(tasks, tasks[1:] + tasks[:1])]
    assert any(t.correct(u.gold) == 0.0 for t, u in shifted)


def test_scorers_read_the_answer_not_the_format():
    think = next(bs.think_tasks())  # "Zoe has 5 balls. ..."
    assert think.correct('<think>she has five</think>{"answer":5}') == 1.0
    assert think.correct('<think>5</think>{"answer":4}') == 0.0
    assert think.correct("<think>5") == 0.0
    call = next(bs.tool_tasks())  # "Add 14 and 15."
    assert call.correct('<tool_call>{"name": "add", "arguments": {"b": 15, "a": 14}}</tool_call>') == 1.0
    swapped = '<tool_call>{"name": "add", "arguments": {"a": 15, "b": 14}}</tool_call>'
    assert call.correct(swapped) == 0.0 and call.name_ok(swapped) == 1.0
    # a required call admits no text before it
    assert asyncio.run(call.constraint.complete(b"Sure. " + call.gold.encode())) == float("-inf")
    assert asyncio.run(call.constraint.complete(call.gold.encode())) == 0.0


def test_paired_difference_matches_tasks_and_its_interval_covers_the_mean():
    recs = [{"family": "f", "task": f"t{i}", "method": m, "particles": 4, "accuracy": a, "name_ok": a,
             "empty": float(a == 0), "seconds": 1.0, "tokens_max": 5}
            for i in range(8) for m, a in (("awrs", i % 2), ("masking", 0.25))]
    recs.append({**recs[0], "task": "only awrs"})
    d = bs.paired(recs, "awrs", "masking")
    assert np.allclose(d, [(i % 2) - 0.25 for i in range(8)])
    mean, lo, hi = bs.interval(d)
    assert mean == pytest.approx(0.25) and lo < mean < hi
    table = bs.summarize(recs)
    assert "| f | 8 | 0.250 [" in table
    assert "| f | masking | 4 | 8 | 0.250 [0.250, 0.250] |" in table


@pytest.mark.slow
def test_a_tiny_run_writes_records_and_resumes(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    argv = ["--limit", "1", "--particles", "2", "--max-tokens", "12", "--jsonl", str(path)]
    bs.main(argv)
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["family"], r["method"]) for r in recs] == [
        ("think_json", "awrs"), ("think_json", "masking"), ("tool_call", "awrs"), ("tool_call", "masking")]
    for r in recs:
        assert 0.0 <= r["accuracy"] <= 1.0 and r["empty"] == float(r["finished"] == 0)
        assert r["tokens_max"] is None or r["tokens_max"] <= 12
    bs.main(argv)  # every (task, method) is in the file: nothing runs again
    assert len(path.read_text().splitlines()) == 4
    assert "| think_json | 1 |" in capsys.readouterr().out
