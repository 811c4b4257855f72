"""benchmarks/bench_maskbench.py on a schema file of our own (the MaskBench corpus is not
vendored): verdicts under both rules, and every timed mask agrees with the forced token's check."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_maskbench as bm  # noqa: E402
import pytest  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Z][a-z]+$"},
        "kind": {"anyOf": [{"enum": ["cat", "dog"]}, {"type": "string", "maxLength": 3}]},
        "n": {"type": "integer", "minimum": 0},
    },
    "required": ["name"],
    "additionalProperties": False,
}
TESTS = [
    {"valid": True, "data": {"name": "Ada", "kind": "dog", "n": 3}},
    {"valid": True, "data": {"name": "Bo", "kind": "ox"}},
    {"valid": False, "data": {"name": "ada"}},
    {"valid": False, "data": {"name": "Ada", "kind": "horse"}},
    {"valid": False, "data": {"name": "Ada", "n": -1}},
    {"valid": False, "data": {"kind": "cat"}},  # dies at its closing brace: "name" is required
]


@pytest.mark.slow
def test_run_schema_on_a_schema_of_our_own(tmp_path):
    path = tmp_path / "Handwritten_1.json"
    path.write_text(json.dumps({"schema": SCHEMA, "tests": TESTS}))
    res = bm.run_schema(bm.TokenizerOnly(), path, mask_every=1)
    assert res["status"] == "ok" and res["split"] == "Handwritten"
    assert len(res["mask_us"]) == sum(t["tokens"] for t in res["tests"] if t["died_at"] is None) \
        + sum(t["died_at"] + 1 for t in res["tests"] if t["died_at"] is not None)
    assert res["mask_vs_check"] == 0
    v = bm.verdicts(res)
    assert v["valid_rejected_eos"] == 0 and v["invalid_accepted_eos"] == 0
    assert v["invalid_accepted_prefix"] == 0
    assert "0 of" in bm.summarize([res])
    # the collector's passes inside each mask are timed (in the worker, where it is hooked)
    assert len(res["mask_gc_us"]) == len(res["mask_us"]) and min(res["mask_gc_us"]) >= 0
    assert "less the collector's passes" in bm.summarize([res])


def test_collector_passes_are_timed():
    import gc

    gc.callbacks.append(bm._time_gc)
    try:
        before = bm.GC_TIME[0]
        junk = [[i] for i in range(200_000)]
        gc.collect()
        assert bm.GC_TIME[0] > before and junk
    finally:
        gc.callbacks.remove(bm._time_gc)
