"""The answer-quality task set (benchmarks/quality_tasks.py): gold answers satisfy their own
constraints, under the oracles and under the project's potentials, and scoring is right."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import quality_tasks as qt  # noqa: E402
from potentials import Grammar, JSONSchema, Regex  # noqa: E402


def test_task_counts_and_names():
    fams = [t.family for t in qt.TASKS]
    assert fams.count("json") >= 30 and fams.count("regex") >= 15 and fams.count("grammar") >= 10
    assert len({t.name for t in qt.TASKS}) == len(qt.TASKS)
    for t in qt.TASKS:
        if t.family == "json":
            assert 3 <= len(t.gold) <= 5, t.name


@pytest.mark.parametrize("task", qt.TASKS, ids=lambda t: t.name)
def test_gold_satisfies_constraint_and_scores_one(task):
    text = qt.gold_text(task)
    answer, valid = qt.parse_answer(task, text, constrained=True)
    assert valid and qt.score(task, answer) == 1.0
    if task.family == "json":
        # every gold value is stated in the prompt's text: the task is answerable
        for v in task.gold.values():
            assert str(v) in task.prompt, (task.name, v)
    if task.family == "grammar":
        # a few-shot chat: each worked answer is a list the grammar accepts, and the last user
        # turn names every gold item
        *shots, last = task.prompt
        assert last["role"] == "user" and all(item in last["content"] for item in task.gold)
        for m in shots:
            if m["role"] == "assistant":
                assert qt.grammar_accepts(m["content"]), m


def _potential(task, **kw):
    if task.family == "json":
        return JSONSchema(task.schema, **kw)
    if task.family == "regex":
        return Regex(task.pattern)
    return Grammar(task.grammar)


@pytest.mark.parametrize("task", [t for t in qt.TASKS if t.name.endswith(("-00", "-07", "-13"))],
                         ids=lambda t: t.name)
def test_gold_accepted_by_potential(task):
    async def run():
        if task.family == "json":
            for ws, text in [("compact", qt.gold_text(task)),
                             ("flexible", json.dumps(task.gold, indent=2)),
                             (4, json.dumps(task.gold, indent=2))]:
                assert await _potential(task, whitespace=ws).complete(text.encode()) == 0.0, ws
            assert await _potential(task, whitespace="compact").complete(
                json.dumps(task.gold, indent=2).encode()) == float("-inf")
        else:
            assert await _potential(task).complete(qt.gold_text(task).encode()) == 0.0
    asyncio.run(run())


def test_json_scoring_counts_fields():
    t = next(t for t in qt.TASKS if t.name == "json-00")  # name, age, city, job
    gold = dict(t.gold)
    assert qt.score(t, gold) == 1.0
    assert qt.score(t, {**gold, "age": 35}) == 0.75
    assert qt.score(t, {**gold, "name": "  maria   LOPEZ "}) == 1.0  # case and spaces ignored
    assert qt.score(t, {**gold, "age": "34"}) == 0.75               # a string is not the number
    assert qt.score(t, {"name": "x"}) == 0.0
    assert qt.score(t, [gold]) == 0.0 and qt.score(t, None) == 0.0


def test_unconstrained_json_reading():
    t = next(t for t in qt.TASKS if t.name == "json-00")
    doc = json.dumps(t.gold, indent=2)
    ans, ok = qt.parse_answer(t, f"Sure! Here it is:\n```json\n{doc}\n```\nHope this helps.", False)
    assert ok and qt.score(t, ans) == 1.0
    ans, ok = qt.parse_answer(t, '{"name": "Maria Lopez", "age": 34}', False)  # fields missing
    assert not ok and ans is None
    assert qt.parse_answer(t, "no json here", False) == (None, False)
    assert qt.parse_answer(t, '{"name": ', False) == (None, False)


def test_regex_and_grammar_reading():
    t = next(t for t in qt.TASKS if t.family == "regex" and t.gold == "2023-03-14")
    assert qt.parse_answer(t, "The date is 2023-03-14.", False) == ("2023-03-14", True)
    assert qt.parse_answer(t, "March 14", False) == (None, False)
    assert qt.score(t, "2023-03-15") == 0.0
    g = next(t for t in qt.TASKS if t.family == "grammar" and t.gold == ["red", "white", "blue"])
    ans, ok = qt.parse_answer(g, "Here is the list:\nwhite, blue, red\n", False)
    assert ok and qt.score(g, ans) == 1.0          # order does not matter
    assert qt.score(g, "red, white") == 0.0        # a missing item fails
    assert qt.score(g, "red, white and blue") == 1.0
    assert not qt.grammar_accepts("Red, white") and qt.grammar_accepts("red, dark blue")


def test_select():
    assert [t.family for t in qt.select(families="regex")] == ["regex"] * 15
    assert len(qt.select(limit=2)) == 6
    assert [t.name for t in qt.select(names="json-03,regex-01")] == ["json-03", "regex-01"]
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        qt.select(names="nope")
    with pytest.raises(ValueError, match="family"):
        qt.select(families="xml")


def test_export_gives_the_peer_the_prompt_ids_of_the_one_prompt_rule(tmp_path, monkeypatch):
    # benchmarks/peers/genlm_control.py conditions genlm-control on exactly these ids
    import bench_quality
    import smc.backends.loading
    from smc.backends.prompts import encode_prompt
    from smc.backends.toy import ToyLM

    vocab = [bytes((b,)) for b in range(32, 127)] + [b"\n", b"<eos>"]
    lm = ToyLM(vocab, b"<eos>", lambda ids: [1 / len(vocab)] * len(vocab),
               chat_template=lambda msgs: "".join(f"<{m['role']}>{m['content']}\n" for m in msgs) + "<assistant>")
    monkeypatch.setattr(smc.backends.loading, "embedded_model_dir", lambda: Path("/models/x"))
    tasks = qt.select("ada,json-00,regex-00")
    path = tmp_path / "tasks.jsonl"
    bench_quality.export_tasks(lm, tasks, str(path))
    got = [json.loads(ln) for ln in path.read_text().splitlines()]
    assert [g["task"] for g in got] == ["ada", "json-00"]  # JSON tasks only
    for g, task in zip(got, tasks):
        assert g["prompt_ids"] == encode_prompt(lm, task.prompt)
        assert b"".join(vocab[i] for i in g["prompt_ids"]).startswith(b"<user>")  # the template applied
        assert g["schema"] == task.schema and g["max_tokens"] == task.max_tokens
        assert g["eos_token_ids"] == lm.eos_token_ids and g["model_dir"] == "/models/x"



def test_summary_pairs_each_method_with_the_baseline_it_is_given():
    import bench_quality

    def rec(method, task, acc, log_ml=-1.0):
        return {"task": task, "family": "json", "method": method, "N": 8, "seed": 0, "accuracy": acc,
                "validity": 1.0, "empty": False, "log_ml": log_ml, "wall_s": 1.0}

    records = [rec("masking:flexible", "a", 0.5, None), rec("masking:flexible", "b", 0.5, None),
               rec("awrs:plain", "a", 0.6, -3.0), rec("awrs:plain", "b", 0.4, -2.0),
               rec("awrs:plain:resampling=x", "a", 0.6, -2.0), rec("awrs:plain:resampling=x", "b", 0.4, -2.0),
               rec("awrs:twist", "a", 0.9, float("-inf")), rec("awrs:twist", "b", 0.9, -1.5)]
    by_masking = bench_quality.summarize(records)
    by_plain = bench_quality.summarize(records, baseline="awrs:plain")
    assert "vs masking (paired)" in by_masking and "vs awrs:plain (paired)" in by_plain
    assert "| awrs:twist | 8 | 2 | 0.90 [0.90, 0.90] | +0.40 [+0.40, +0.40] |" in by_masking
    # log Ẑ is paired where both are finite (task b only), and masking has none to pair
    assert "| -1.5 | - | 1.0 |" in by_masking.split("| awrs:twist |")[1].splitlines()[0]
    row = by_plain.split("| awrs:twist |")[1].splitlines()[0]
    assert row.startswith(" 8 | 2 | 0.90 [0.90, 0.90] | +0.40 [+0.30, +0.50] |")
    assert row.endswith("| +0.50 [+0.50, +0.50] | 1.0 |")
    # a method whose name extends the baseline's is compared with it, not taken for it
    row = by_plain.split("| awrs:plain:resampling=x |")[1].splitlines()[0]
    assert row.endswith("| +0.50 [+0.00, +1.00] | 1.0 |")


def test_log_z_table_gives_the_difference_of_medians_the_spread_and_the_mean_z_per_task():
    import bench_quality

    def rec(method, task, seed, log_ml):
        return {"task": task, "family": "json", "method": method, "N": 8, "seed": seed, "accuracy": 0.5,
                "validity": 1.0, "empty": log_ml is None, "log_ml": log_ml, "wall_s": 1.0}

    ours = {"a": [-1.0, -2.0, -3.0], "b": [-1.0, None, -1.0]}
    peer = {"a": [-2.0, -2.0, -2.0], "b": [-1.0, -1.0, -1.0]}
    records = [rec(m, t, s, v) for m, runs in (("smc", ours), ("peer", peer))
               for t, vs in runs.items() for s, v in enumerate(vs)]
    records.append(rec("masking:flexible", "a", 0, None) | {"empty": False})  # no log Ẑ: no row
    table = bench_quality.summarize(records, baseline="peer").split("log Ẑ against peer")[1]
    row = table.split("| smc |")[1].splitlines()[0]
    # medians over the 5 pairs where both finished: -1 against -2
    assert row.startswith(" 8 | 5 | -1.00 | -2.00 | +1.00 [")
    # spread: task a only (b has 2 finished pairs): sd 1 against 0; log mean Ẑ: task a
    # log((e^-1 + e^-2 + e^-3) / 3) + 2 = +0.309, task b log(2/3) = -0.405 (its empty run is Ẑ = 0);
    # per task (a only): median -2 against -2
    # all 6 pairs, the empty run lowest: ours -inf, -3, -2, -1, -1, -1 (median -1.5) against the
    # peer's -2, -2, -2, -1, -1, -1 (-1.5); a resample with the empty run at its median has no
    # finite lower bound
    assert row.endswith("| 1.00 | 0.00 | -0.05 | +0.00 (1/1) | +0.00 [-inf, +1.00] (6) |")
    assert "| masking:flexible |" not in table
    # per task: +3 on task a, -1 on task c: mean +1, one of two at or above
    records = [rec(m, t, s, v) for m, runs in (("smc", {"a": [-1.0] * 3, "c": [-5.0] * 3}),
                                               ("peer", {"a": [-4.0] * 3, "c": [-4.0] * 3}))
               for t, vs in runs.items() for s, v in enumerate(vs)]
    row = bench_quality.summarize(records, baseline="peer").split("log Ẑ against peer")[1].split("| smc |")[1]
    assert row.splitlines()[0].endswith("| +1.00 (1/2) | +1.00 [-1.00, +3.00] (6) |")
    # half or more of one side's runs without an answer: its median is -inf; of both: no difference
    def all_runs(ours: list, peer: list) -> str:
        records = [rec(m, "a", s, v) for m, vs in (("smc", ours), ("peer", peer)) for s, v in enumerate(vs)]
        row = bench_quality.summarize(records, baseline="peer").split("log Ẑ against peer")[1].split("| smc |")[1]
        return row.splitlines()[0].rsplit(" | ", 1)[1]

    assert all_runs([None, None, -1.0, -2.0], [-1.0] * 4).startswith("-inf [-inf, ")
    assert all_runs([-1.0] * 3, [None, None, -1.0]).startswith("+inf [")
    assert all_runs([None, -1.0, None, -1.0], [None, None, -1.0, -1.0]) == "no answer in half the runs of either (4) |"


def test_method_spec_names_every_setting_it_passes_on():
    import bench_quality

    m = bench_quality.parse_method(
        "awrs:flexible:per_byte=0.5:islands=1:resampling=systematic:power=0.5:max_checks=9:early_fallback=2")
    assert m == {"sampler": "awrs", "whitespace": "flexible", "critic": (1.0, 0.5, None), "islands": 1,
                 "resampling": "systematic", "power": 0.5, "options": (("early_fallback", 2), ("max_checks", 9))}
    # hold alone: the default twist with its hold set
    assert bench_quality.parse_method("awrs:flexible:hold=0")["critic"] == (1.0, 0.5, False)
    assert bench_quality.parse_method("masking:flexible")["resampling"] is None  # generate's default
    assert bench_quality.parse_method("masking:flexible")["power"] is None
    with pytest.raises(ValueError, match="unknown part 'resample=x'"):
        bench_quality.parse_method("awrs:resample=x")
    with pytest.raises(ValueError, match="unknown part 'max_checks=9'"):  # not an option of masking
        bench_quality.parse_method("masking:max_checks=9")


def test_cells_differing_in_any_setting_are_different_runs():
    import bench_quality

    task = qt.select("json-00")[0]
    base = bench_quality.run_key("awrs:flexible:islands=1", 8, task, 0)
    share = bench_quality.SAMPLERS["awrs"].OPTIONS["early_fallback_permille"]
    for other in ("awrs:flexible:islands=1:resampling=systematic", "awrs:flexible:islands=1:per_byte=0.5",
                  "awrs:compact:islands=1", "direct:flexible:islands=1", "awrs:flexible:islands=2",
                  "awrs:flexible:islands=1:power=1", f"awrs:flexible:islands=1:early_fallback_permille={share + 1}"):
        assert bench_quality.run_key(other, 8, task, 0) != base, other
    # the same run under two names: N = 8 is one population by default; an option at its default
    assert bench_quality.run_key("awrs:flexible", 8, task, 0) == base
    assert bench_quality.run_key(f"awrs:flexible:early_fallback_permille={share}", 8, task, 0) == base
