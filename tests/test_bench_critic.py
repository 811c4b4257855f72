"""benchmarks/bench_critic.py end to end in its quick form, on the embedded model and a corpus
of two schemas written here (the MaskBench corpus is not vendored): a closed object, whose
searches find lengths, and an object open to any further key before a required one, whose byte
searches give up and whose lengths the constraint's own completion gives; the records say
which, under three settings."""

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
    records = tmp_path / "critic.jsonl"
    out = bench_critic.main(["--quick", "--corpora", "jsonschemabench", "--corpus", str(d),
                             "--settings", "100,bytes:100,off", "--jsonl", str(records)])
    printed = capsys.readouterr().out
    rows = out["jsonschemabench"]
    assert list(rows) == ["100", "bytes:100", "off"] and all(len(r) == 2 for r in rows.values())
    assert rows["off"][0]["searches"] == [] and rows["off"][0]["critic_s"] == 0.0
    default = {r["name"]: r for r in rows["100"]}
    bytes_only = {r["name"]: r for r in rows["bytes:100"]}
    for by_name in (default, bytes_only):
        assert any(m is not None and m > 0 for m, _, _, _ in by_name["Handwritten_1"]["searches"])
    # the open object: the byte search gives up within its states, after more advances than
    # states; the constraint answers
    given_up = [(n, a) for m, n, _, a in bytes_only["Github_easy_2"]["searches"] if m is None]
    assert given_up and all(BREADTH_NODES < n <= 100 + BREADTH_NODES and a > n for n, a in given_up)
    assert not any(known for _, _, known, _ in bytes_only["Github_easy_2"]["searches"])
    opened = default["Github_easy_2"]["searches"]
    assert opened and all(m is not None for m, _, _, _ in opened) and any(known for _, _, known, _ in opened)
    assert "jsonschemabench, 100: requests 2" in printed and "by the constraint's completion" in printed
    assert "byte advances per gave up search" in printed
    # the records read back give the same summaries, without a run
    again = bench_critic.main(["--summarize", str(records)])
    assert {k: len(v) for k, v in again["jsonschemabench"].items()} == {k: 2 for k in rows}

    def summaries(text):
        return [line for line in text.splitlines() if line.startswith(("jsonschemabench", "    "))]

    assert summaries(capsys.readouterr().out) == summaries(printed) != []
    for r in rows["100"] + rows["bytes:100"]:
        assert r["wall_s"] > 0 and 0 <= r["critic_s"] <= r["wall_s"]
