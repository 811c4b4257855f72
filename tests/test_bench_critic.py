"""benchmarks/bench_critic.py end to end in its quick form, on the embedded model and a corpus
of two schemas written here (the MaskBench corpus is not vendored): a closed object, whose
searches find lengths, and an object open to any further key before a required one, whose
searches give up; the records say which, and the same request under two max_nodes values."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_critic  # noqa: E402
from smc.engine.critics import BREADTH_NODES  # noqa: E402

SCHEMAS = {
    "Handwritten_1.json": {"type": "object", "required": ["name", "age"], "additionalProperties": False,
                           "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}},
    "Github_easy_2.json": {"type": "object", "required": ["a", "b"],
                           "properties": {"a": {"type": "string"}, "b": {"type": "string"}}},
}


@pytest.mark.slow
def test_quick_form_logs_found_and_given_up_searches(tmp_path, capsys):
    d = tmp_path / "maskbench"
    d.mkdir()
    for name, schema in SCHEMAS.items():
        (d / name).write_text(json.dumps({"schema": schema, "tests": []}))
    out = bench_critic.main(["--quick", "--corpora", "jsonschemabench", "--corpus", str(d),
                             "--max-nodes", "100,20,off"])
    printed = capsys.readouterr().out
    rows = out["jsonschemabench"]
    assert list(rows) == [100, 20, None] and all(len(r) == 2 for r in rows.values())
    assert rows[None][0]["searches"] == [] and rows[None][0]["critic_s"] == 0.0
    by_name = {r["name"]: r for r in rows[100]}
    closed, open_ = by_name["Handwritten_1"], by_name["Github_easy_2"]
    assert any(m is not None and m > 0 for m, _ in closed["searches"])
    assert any(m is None and n > BREADTH_NODES for m, n in open_["searches"])
    assert all(n <= 100 + BREADTH_NODES for _, n in open_["searches"])
    assert "jsonschemabench, max_nodes 100: requests 2" in printed and "gave up" in printed
    for r in rows[100] + rows[20]:
        assert r["wall_s"] > 0 and 0 <= r["critic_s"] <= r["wall_s"]
