"""benchmarks/bench_sidebyside.py: the schema draw, the scoring and the summary on records of our
own, and its quick form end to end on a corpus of three schemas written here (the MaskBench
corpus is not vendored): three smc-steer rows always (a fourth on a toy LM), each masking peer only where its venv was
built (``bench_sidebyside.py --setup``)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_sidebyside as sbs  # noqa: E402
from peers import venvs  # noqa: E402

SCHEMAS = {
    "Handwritten_1.json": {"type": "integer", "minimum": 3, "maximum": 9},
    "Synthesized_4.json": {"enum": ["red", "green"]},
    "BFCL_java_7.json": {"type": "object", "properties": {"ok": {"type": "boolean"}},
                         "required": ["ok"], "additionalProperties": False},
}


def _corpus(tmp_path: Path) -> Path:
    d = tmp_path / "maskbench"
    d.mkdir()
    for name, schema in SCHEMAS.items():
        (d / name).write_text(json.dumps({"schema": schema, "tests": []}))
    return d


def test_split_of_reads_the_prefix_and_joins_bfcl():
    assert sbs.split_of("Github_easy_12.json") == "Github_easy"
    assert sbs.split_of("Glaiveai2K---calculate_area_3.json") == "Glaiveai2K"
    assert sbs.split_of("BFCL_java_3.json") == sbs.split_of("BFCL_multiple_40.json") == "BFCL"


def test_selection_is_stratified_seeded_and_nested(tmp_path):
    d = tmp_path / "c"
    d.mkdir()
    for split, n in (("Alpha", 7), ("Beta", 2), ("Gamma", 30)):
        for i in range(n):
            (d / f"{split}_{i}.json").write_text("{}")
    two = sbs.select(d, 2, seed=5)
    three = sbs.select(d, 3, seed=5)
    count = lambda files, s: sum(sbs.split_of(p.name) == s for p in files)  # noqa: E731
    assert [count(three, s) for s in ("Alpha", "Beta", "Gamma")] == [3, 2, 3]  # min(k, split size)
    assert set(two) <= set(three)  # a larger draw only adds schemas
    assert sbs.select(d, 3, seed=5) == three and sbs.select(d, 3, seed=6) != three
    # choosing splits keeps each split's own draw
    assert sbs.select(d, 3, seed=5, splits=["Gamma"]) == [p for p in three if p.name.startswith("Gamma")]
    with pytest.raises(SystemExit, match="unknown splits"):
        sbs.select(d, 1, seed=0, splits=["Delta"])


def test_valid_follows_the_declared_draft():
    # draft 4's exclusiveMaximum is a boolean beside maximum; 2020-12's is a number
    d4 = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "number", "maximum": 5,
          "exclusiveMaximum": True}
    assert sbs.Scorer.valid(d4, "4.5") and not sbs.Scorer.valid(d4, "5")
    d2020 = {"type": "number", "exclusiveMaximum": 5}
    assert sbs.Scorer.valid(d2020, "4") and not sbs.Scorer.valid(d2020, "5")
    assert not sbs.Scorer.valid(d2020, "4 x") and not sbs.Scorer.valid(d2020, None)


def _rec(engine, tid, split="S", **kw):
    base = {"engine": engine, "task_id": tid, "split": split, "accepted": True, "error": None,
            "finished": True, "valid": True, "text": "1", "token_ids": [16], "compile_s": 0.01,
            "wall_s": 2.0, "tokens": 1, "log_z": None, "logp": -3.0, "versions": {}}
    base.update(kw)
    return base


def test_summary_counts_and_failure_classes():
    records = [
        _rec("smc-steer", "a", log_z=-1.0), _rec("xgrammar", "a"),
        _rec("smc-steer", "b", accepted=False, finished=False, valid=False, error="ValueError: no"),
        _rec("xgrammar", "b"),
        _rec("smc-steer", "c", finished=False, valid=False, log_z=None), _rec("xgrammar", "c", valid=False),
        _rec("smc-steer", "d", finished=False, valid=False), _rec("outlines", "d", split="S"),
    ]
    out = sbs.summarize(records)
    assert "| **total** | smc-steer | 4 | 3 | 1 | 1 |" in out
    assert out.count("| **total** | smc-steer |") == 1 and "| -inf |" in out  # median of (-1, -inf, -inf)
    assert "| **total** | xgrammar | 3 | 3 | 3 | 2 |" in out
    fails = sbs.failures(records)
    # c: no engine has a valid output there, so it is no failure class of smc-steer's
    assert fails == ["- b (S): compile error: ValueError: no; valid from xgrammar",
                     "- d (S): no finished output within max_tokens; valid from outlines"]
    # valid outputs per split (a column per engine) and the coverage goal per smc-steer row:
    # 1 valid against the best masking engine's 2 (xgrammar; outlines 1); equal walls: the
    # first name
    assert "| split | smc-steer | xgrammar | outlines |" in out and "| S | 1 | 2 | 1 |" in out
    assert ("- smc-steer: 1 valid vs the best masking engine's 2; below the best masking engine on "
            "1 split(s): S; wall 1.0x the fastest masking engine's (outlines)") in out


def test_coverage_when_every_masking_engine_refused_the_schemas():
    records = [_rec("smc-steer", "a"), _rec("xgrammar", "a", accepted=False, valid=False, wall_s=None)]
    assert sbs.coverage(records)[-1] == ("- smc-steer: 1 valid vs the best masking engine's 0; below the "
                                         "best masking engine on 0 split(s); wall no masking engine ran")


def test_coverage_goal_met_on_every_split():
    records = [_rec("smc-steer:strict", "a", split="A"), _rec("llguidance", "a", split="A", valid=False, wall_s=1.0),
               _rec("smc-steer:strict", "b", split="B"), _rec("llguidance", "b", split="B", wall_s=1.0)]
    assert sbs.coverage(records)[-1] == ("- smc-steer:strict: 2 valid vs the best masking engine's 1; below the "
                                         "best masking engine on 0 split(s); wall 2.0x the fastest masking engine's "
                                         "(llguidance)")


def test_rows_of_another_seed_are_rows_of_their_own():
    assert sbs.smc_row_name("smc-steer:twist", 0) == "smc-steer:twist"
    assert sbs.smc_row_name("smc-steer:twist", 2) == "smc-steer:twist@seed=2"
    records = [_rec("smc-steer", "a", split="A"), _rec("smc-steer@seed=1", "a", split="A", valid=False),
               _rec("llguidance", "a", split="A", wall_s=1.0)]
    lines = sbs.coverage(records)
    assert lines[0] == "| split | smc-steer | llguidance | smc-steer@seed=1 |"
    assert lines[-1].startswith("- smc-steer@seed=1: 0 valid vs the best masking engine's 1; below the "
                                "best masking engine on 1 split(s): A")


#: the defaults, a row with an smc.generate setting, and one with a JSONSchema option: the ways a
#: row's settings reach a sampled run (bench_sidebyside.run_smc); temperature 0, the other way,
#: is checked on a toy LM below (on the embedded model its exact search alone took 40 of this
#: test's 70 s). Each row is three cold runs of the embedded model.
QUICK_ROWS = ("smc-steer", "smc-steer:N=1", "smc-steer:strict")


def test_a_temperature_0_row_answers_the_most_probable_valid_text():
    """On a toy LM whose most probable texts are invalid or less likely: of the schema's values
    '"a"' (p = 5e-4), '"b"' (4e-4) and '"ab"' (3.6e-3), the T = 0 row answers '"ab"'."""
    from potentials import JSONSchema
    from smc.backends.toy import ToyLM

    def probs(ids):  # vocab '"', 'a', 'b', '$' (EOS); after an 'a' a 'b' is likely
        return [0.05, 0.02, 0.9, 0.03] if ids and ids[-1] == 1 else [0.4, 0.5, 0.05, 0.05]

    lm = ToyLM(['"', "a", "b", "$"], "$", probs)
    settings, options = sbs.SMC_ROWS["smc-steer:strict+T=0"]  # run_smc's two steps, less its cache reset
    task = {"prompt_ids": [], "max_tokens": 6}
    r = sbs.generate(lm, task, JSONSchema({"enum": ["a", "b", "ab"]}, **options), {**settings, "seed": 0})
    assert list(r.posterior) == ['"ab"']


@pytest.mark.slow
def test_quick_form_runs_the_smc_steer_rows(tmp_path, capsys):
    corpus, out = _corpus(tmp_path), tmp_path / "runs.jsonl"
    argv = ["--quick", "--corpus", str(corpus), "--records", str(out), "--engines", ",".join(QUICK_ROWS)]
    records = sbs.main(argv)
    assert sorted((r["engine"], r["split"]) for r in records) == sorted(
        (e, s) for e in QUICK_ROWS for s in ("BFCL", "Handwritten", "Synthesized"))
    for r in records:
        assert r["accepted"] and r["error"] is None and r["compile_s"] >= 0
        if r["finished"]:  # a constrained sampler never finishes with an invalid text
            assert r["valid"] and r["tokens"] <= sbs.QUICK["max_tokens"]
            assert math.isfinite(r["logp"]) and r["logp"] < 0 and r["log_z"] <= 0
    assert sum(r["finished"] for r in records if r["engine"] == "smc-steer") >= 2
    assert "| **total** | smc-steer | 3 | 3 |" in capsys.readouterr().out
    # resumed: the saved pairs are not run again
    again = sbs.main(argv)
    n = 3 * len(QUICK_ROWS)
    assert len(out.read_text().splitlines()) == n and len(again) == n


@pytest.mark.slow
@pytest.mark.parametrize("engine", sbs.MASKING_ENGINES)
def test_quick_form_runs_a_masking_peer_whose_venv_exists(engine, tmp_path):
    if not venvs.exists(engine):
        pytest.skip(f"no .venv-peers/{engine}: build it with bench_sidebyside.py --setup --engines {engine}")
    corpus, out = _corpus(tmp_path), tmp_path / "runs.jsonl"
    records = sbs.main(["--quick", "--corpus", str(corpus), "--records", str(out), "--engines", engine])
    assert len(records) == 3 and {r["engine"] for r in records} == {engine}
    for r in records:
        assert r["accepted"], r["error"]
        assert r["versions"][engine] and r["versions"]["torch"].startswith("2.13.0")
        if r["finished"]:  # one whole JSON text, scored; valid or not is the engine's result
            json.loads(r["text"])
            assert isinstance(r["valid"], bool) and math.isfinite(r["logp"]) and r["logp"] < 0
        else:
            assert r["logp"] is None and not r["valid"]


@pytest.mark.slow
def test_an_exported_task_file_runs_elsewhere_as_drawn(tmp_path):
    """--export then --tasks: the same schemas, prompt ids and budget, run from the file alone
    (no corpus), its model directory read as this machine's copy."""
    corpus, tasks_file, out = _corpus(tmp_path), tmp_path / "tasks.jsonl", tmp_path / "runs.jsonl"
    sbs.main(["--quick", "--corpus", str(corpus), "--export", str(tasks_file)])
    exported = sbs.read_jsonl(tasks_file)
    assert len(exported) == 3 and {t["max_tokens"] for t in exported} == {sbs.QUICK["max_tokens"]}
    sbs.write_jsonl(tasks_file, [{**t, "model_dir": "/another/machine/model"} for t in exported])
    records = sbs.main(["--tasks", str(tasks_file), "--corpus", str(tmp_path / "absent"),
                        "--engines", "smc-steer:N=1", "--device", "cpu", "--records", str(out)])
    assert sorted(r["task_id"] for r in records) == sorted(t["task_id"] for t in exported)
    for r in records:
        assert r["accepted"] and r["error"] is None
        assert r["tokens"] is None or r["tokens"] <= sbs.QUICK["max_tokens"]
    assert all(t["model_dir"] != "/another/machine/model" for t in sbs.read_tasks(tasks_file))


def test_genlm_control_is_refused_off_the_cpu_before_anything_loads(tmp_path):
    with pytest.raises(SystemExit, match="genlm-control runs on the CPU only"):
        sbs.main(["--tasks", str(tmp_path / "t.jsonl"), "--engines", "smc-steer,genlm-control", "--device", "cuda"])


class _Tokenizer:
    """A byte-level tokenizer of two-character pieces, for the token-reading check."""

    def encode(self, text, add_special_tokens=False):
        data = text.encode("utf-8")
        self.pieces = [data[i:i + 2] for i in range(0, len(data), 2)]
        return list(range(len(self.pieces)))


def test_an_engine_that_misreads_the_tokenizers_bytes_is_caught():
    """check_token_bytes passes an engine that reads every token of the probe as its bytes, and
    names the first token read otherwise (llguidance on transformers 5.17's tokenizer.json read
    the newline as the two bytes of "Ċ")."""
    from peers.masking import check_token_bytes

    tok = _Tokenizer()

    def right(ids):
        return b"".join(tok.pieces[i] for i in ids)

    def newline_as_c_dot(ids):
        return right(ids).replace(b"\n", "Ċ".encode())

    check_token_bytes(right, tok)
    with pytest.raises(RuntimeError, match=r"reads token 0 as b'\{\\xc4\\x8a' where the text has b'\{\\n '"):
        check_token_bytes(newline_as_c_dot, tok)


def test_a_runner_that_cannot_run_its_engine_fails_every_task_at_once(tmp_path, monkeypatch):
    """A runner exiting with UNUSABLE gives every task its reason in one go, without a restart
    per task (a restart loads the model again)."""
    from peers.masking import UNUSABLE

    starts = tmp_path / "starts"
    runner = tmp_path / "runner.py"
    runner.write_text(f"import sys\nopen({str(starts)!r}, 'a').write('x')\n"
                      f"print('llguidance cannot run on this model: it reads token 198 as Ċ', file=sys.stderr)\n"
                      f"sys.exit({UNUSABLE})\n")
    monkeypatch.setattr(venvs, "exists", lambda engine: True)
    monkeypatch.setattr(venvs, "python_of", lambda engine: Path(sys.executable))
    monkeypatch.setattr(venvs, "versions", lambda engine: {})
    monkeypatch.setitem(sbs.RUNNERS, "llguidance", runner)
    tasks = [{"task_id": f"t{i}", "split": "S", "schema": {}} for i in range(3)]
    records = list(sbs.run_peer("llguidance", tasks, request_timeout=60, memory_gb=0))
    assert [r["task_id"] for r in records] == ["t0", "t1", "t2"] and starts.read_text() == "x"
    assert all(not r["finished"] and "reads token 198" in r["error"] and f"exited with {UNUSABLE}" in r["error"]
               for r in records)
