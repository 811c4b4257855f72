"""``python -m smc generate``: output formats and one-line errors (exit status 2)."""

import json
import re
import subprocess
import sys

import pytest

from smc.api import cli
from tests.smc.api.test_generate import toy


@pytest.fixture
def toy_lm(monkeypatch):
    """The CLI's model loader returns the toy LM (the flags are still parsed and checked)."""
    seen = {}

    def fake_load(name=None, backend="hf", **kw):
        seen.update(name=name, backend=backend)
        return toy()

    monkeypatch.setattr(cli, "load_lm", fake_load)
    return seen


def test_json_output_regex(toy_lm, capsys):
    code = cli.main(["generate", "--prompt", "", "--regex", r"[12]{2}-[12]", "--particles", "6",
                     "--max-tokens", "5", "--seed", "1", "--json", "--quiet", "--model", "m"])
    out = capsys.readouterr().out
    assert code == 0 and toy_lm == {"name": "m", "backend": "hf"}
    data = json.loads(out)
    assert set(data) == {"samples", "posterior", "log_ml", "ess", "stats"}
    assert len(data["samples"]) == 6 and isinstance(data["log_ml"], float)
    for s in data["samples"]:
        assert set(s) == {"text", "log_weight", "finished"}
        if s["finished"]:
            assert re.fullmatch(r"[12]{2}-[12]", s["text"])
    assert abs(sum(data["posterior"].values()) - 1) < 1e-9


def test_choice_flag(toy_lm, capsys):
    code = cli.main(["generate", "--prompt", "", "--choice", "12", "21-", "1", "--particles", "4",
                     "--max-tokens", "4", "--seed", "0", "--json", "--quiet"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["posterior"]
    assert set(data["posterior"]) <= {"12", "21-", "1"}


@pytest.mark.parametrize("method", ["beam", "top_k", "steer"])
def test_json_output_search_methods(toy_lm, capsys, method):
    argv = ["generate", "--prompt", "", "--regex", r"[12]{2}-[12]", "--particles", "3",
            "--max-tokens", "5", "--json", "--quiet", "--method", method]
    code = cli.main(argv + (["--n-beam", "2"] if method == "steer" else []))
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["stats"]["method"] == method and 1 <= len(data["samples"]) <= 3
    for s in data["samples"]:
        assert s["finished"] and re.fullmatch(r"[12]{2}-[12]", s["text"])
    if method != "steer":  # highest mass first
        weights = [s["log_weight"] for s in data["samples"]]
        assert weights == sorted(weights, reverse=True)


def test_n_beam_without_steer_is_a_one_line_error(toy_lm, capsys):
    code = cli.main(["generate", "--prompt", "", "--regex", "1", "--method", "beam", "--n-beam", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "n_beam is only used by method='steer'" in err and "Traceback" not in err


def test_unsatisfiable_json_has_null_log_ml(toy_lm, capsys):
    code = cli.main(["generate", "--prompt", "", "--regex", "zz", "--max-tokens", "2",
                     "--particles", "2", "--json", "--quiet"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["log_ml"] is None and data["posterior"] == {}


def test_text_output_grammar_and_schema_files(toy_lm, tmp_path, capsys):
    grammar = tmp_path / "g.lark"
    grammar.write_text('start: NUM "-" NUM\nNUM: /[12]+/\n')
    assert cli.main(["generate", "--prompt", "", "--grammar", str(grammar), "--particles", "4",
                     "--max-tokens", "4", "--quiet"]) == 0
    assert "log_ml" in capsys.readouterr().out
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "integer"}))
    assert cli.main(["generate", "--prompt", "", "--json-schema", str(schema), "--particles", "4",
                     "--max-tokens", "3", "--quiet", "--sampler", "direct"]) == 0


@pytest.mark.parametrize(
    "argv,msg",
    [
        (["generate", "--prompt", "x"], "one of the arguments"),
        (["generate", "--prompt", "x", "--regex", "a", "--particles", "0"], "particles"),
        (["generate", "--prompt", "x", "--regex", "a", "--max-tokens", "0"], "max_tokens"),
        (["generate", "--prompt", "x", "--regex", "a", "--sampler", "gibbs"], "invalid choice"),
        (["generate", "--prompt", "x", "--regex", "(unclosed"], "regex|regular expression|pattern"),
        (["generate", "--prompt", "x", "--grammar", "/nonexistent.lark"], "cannot read"),
        (["fly"], "invalid choice"),
    ],
)
def test_errors_are_one_line_exit_2(toy_lm, capsys, argv, msg):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    assert re.search(msg, err, re.I), err


def test_bad_schema_and_grammar(toy_lm, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert cli.main(["generate", "--prompt", "x", "--json-schema", str(bad)]) == 2
    g = tmp_path / "bad.lark"
    g.write_text("start: ???")
    assert cli.main(["generate", "--prompt", "x", "--grammar", str(g)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "Traceback" not in err


def test_module_entry_point_exit_status():
    proc = subprocess.run([sys.executable, "-m", "smc", "generate", "--prompt", "x", "--regex", "a",
                           "--particles", "-1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: particles")
    assert proc.stderr.count("\n") == 1


@pytest.fixture
def generate_kwargs(monkeypatch):
    """The fields of the Request the CLI passes to generate (the run still happens)."""
    import dataclasses

    seen = {}
    real = cli.generate

    def spy(request, **kw):
        seen.update((f.name, getattr(request, f.name)) for f in dataclasses.fields(request))
        return real(request, **kw)

    monkeypatch.setattr(cli, "generate", spy)
    return seen


def test_islands_flag(toy_lm, capsys, generate_kwargs):
    """--islands reaches generate, and a bad value is one clear line."""
    code = cli.main(["generate", "--prompt", "", "--regex", r"[12a-]*", "--particles", "8", "--islands", "2",
                     "--max-tokens", "5", "--json", "--quiet"])
    assert code == 0 and len(json.loads(capsys.readouterr().out)["samples"]) == 8
    assert generate_kwargs["islands"] == 2 and generate_kwargs["lookahead"] == 1.0  # the default, resolved
    code = cli.main(["generate", "--prompt", "", "--regex", "1", "--particles", "8", "--islands", "3"])
    err = capsys.readouterr().err
    assert code == 2 and "islands=3 must divide particles=8" in err and "Traceback" not in err


def test_finish_share_flag(toy_lm, capsys):
    """--finish-share banks finished copies (more samples than particles); a bad value is one
    clear line."""
    code = cli.main(["generate", "--prompt", "", "--regex", r"[12a-]*", "--particles", "4",
                     "--finish-share", "0.5", "--max-tokens", "5", "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and len(out["samples"]) > 4
    code = cli.main(["generate", "--prompt", "", "--regex", "1", "--finish-share", "1.5"])
    err = capsys.readouterr().err
    assert code == 2 and "finish_share must be in [0, 1)" in err and "Traceback" not in err


def test_lookahead_flag(toy_lm, capsys, generate_kwargs):
    """--lookahead reaches generate, and a bad value is one clear line."""
    code = cli.main(["generate", "--prompt", "", "--regex", r"([12])\1-", "--particles", "4",
                     "--lookahead", "1.5", "--max-tokens", "5", "--json", "--quiet"])
    assert code == 0 and generate_kwargs["lookahead"] == 1.5
    assert all(re.fullmatch(r"([12])\1-", s["text"]) for s in json.loads(capsys.readouterr().out)["samples"]
               if s["finished"])
    code = cli.main(["generate", "--prompt", "", "--regex", "1", "--lookahead", "-1"])
    err = capsys.readouterr().err
    assert code == 2 and "lookahead must be a finite number >= 0" in err and "Traceback" not in err


def test_strict_closes_the_schema_and_needs_json_schema(toy_lm, tmp_path, capsys):
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}}))
    argv = ["generate", "--prompt", "x", "--json-schema", str(schema)]
    assert cli.request_of(cli.build_parser().parse_args([*argv, "--strict"])).constraint.strict
    assert not cli.request_of(cli.build_parser().parse_args(argv)).constraint.strict
    assert cli.main(["generate", "--prompt", "x", "--regex", "a", "--strict"]) == 2
    assert "--strict applies to --json-schema" in capsys.readouterr().err
