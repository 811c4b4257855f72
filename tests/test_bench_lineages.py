"""benchmarks/bench_lineages.py's value_selection on records written here: it counts, at each
resampling event where particles disagree on a field, the wrong ones' share of the particles,
of the weight and of the children."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_lineages  # noqa: E402


def decode(ids: list[int]) -> str:
    return bytes(ids).decode()


def step(texts: list[str], lw: list[float], ancestors: list[int] | None) -> dict:
    return dict(tokens=[list(t.encode()) for t in texts], lw=lw, ancestors=ancestors)


def test_value_selection_counts_the_wrong_values_share_at_each_event():
    record = dict(N=4, raw=[
        # no event: not counted
        step(['{"age": 36,', '{"age": 12,', '{"age": 36,', '{"age": 36,'], [0.0] * 4, None),
        # an event where one of four is wrong and carries half the weight, and gets 2 children
        step(["", "", "", ""], [0.0, math.log(3.0), 0.0, 0.0], [1, 1, 0, 2]),
        # the population now holds ages 12, 12, 36, 36 (two wrong), with a quarter of the weight
        step([" x", " x", " x", " x"], [math.log(0.5), math.log(0.5), 0.0, math.log(2.0)], [3, 3, 3, 0]),
    ])
    got = bench_lineages.value_selection([record], decode, "age", 36)
    assert got["events"] == 2
    assert got["wrong_share_of_particles"] == pytest.approx(0.25 + 0.5)
    assert got["wrong_share_of_weight"] == pytest.approx(0.5 + 1.0 / 4.0, abs=0.01)
    assert got["wrong_share_of_children"] == pytest.approx(0.5 + 0.25)


def test_value_selection_skips_events_before_every_particle_wrote_the_field():
    record = dict(N=2, raw=[step(['{"age": 3', '{"age": 36,'], [0.0, 1.0], [1, 1])])
    assert bench_lineages.value_selection([record], decode, "age", 36)["events"] == 0
