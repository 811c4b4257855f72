"""The README's commands, run as tests: its ```python blocks (in order, one namespace) and every
`python -m smc ...` line of its ```sh blocks; and the ```python blocks of docs/usage.md, the page
the README sends readers to for the rest of the API. Blocks without a language tag (loading other
models, vLLM: docs/backends.md) need the network or a GPU and are not run here."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
USAGE = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")


def blocks(lang: str, text: str = README) -> list[str]:
    """The bodies of the fenced blocks of ``text`` tagged ``lang``, in order."""
    return [body for tag, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.M | re.S) if tag == lang]


def cli_lines() -> list[str]:
    return [ln.strip() for body in blocks("sh") for ln in body.splitlines()
            if ln.strip().startswith("python -m smc")]


def test_readme_starts_with_the_two_commands():
    first = README.split("\n\n")[1].splitlines()
    assert [ln.split("#")[0].strip() for ln in first] == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert blocks("python") and cli_lines()


def run_cli(line: str) -> subprocess.CompletedProcess:
    args = shlex.split(line)
    assert args[:3] == ["python", "-m", "smc"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *args[1:]], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)


def test_cli_help():
    line = next(ln for ln in cli_lines() if ln.endswith("--help"))
    out = run_cli(line)
    assert out.returncode == 0, out.stderr
    for flag in ("--prompt", "--regex", "--grammar", "--json-schema", "--particles", "--max-tokens",
                 "--seed", "--sampler", "--model", "--backend", "--json"):
        assert flag in out.stdout


@pytest.mark.slow
def test_cli_generate_commands():
    lines = [ln for ln in cli_lines() if " generate " in ln and "--help" not in ln]
    assert lines
    for line in lines:
        out = run_cli(line)
        assert out.returncode == 0, (line, out.stderr[-2000:])
        if "--json" in shlex.split(line):
            data = json.loads(out.stdout)
            assert set(data) >= {"samples", "posterior", "log_ml", "ess", "stats"}
            pattern = shlex.split(line)[shlex.split(line).index("--regex") + 1]
            finished = [s["text"] for s in data["samples"] if s["finished"]]
            assert finished and all(re.fullmatch(pattern, t) for t in finished)


def run_python_blocks(text: str, tmp_path: Path) -> list[str]:
    """The ```python blocks of ``text``, in order, as one script in a fresh interpreter (as a
    reader runs them) in ``tmp_path``; returns its stdout lines."""
    script = tmp_path / "tour.py"
    script.write_text("import matplotlib\nmatplotlib.use('Agg')\n" + "\n".join(blocks("python", text)))
    # one torch thread: two spinning BLAS threads per process slow a busy 2-core machine severalfold
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.splitlines()


@pytest.mark.slow
def test_python_tour_runs(tmp_path):
    lines = run_python_blocks(README, tmp_path)
    assert re.match(r"[0-9]{3}-[0-9]{3}-[0-9]{4} ", lines[0])               # the phone number
    rest = "\n".join(lines[1:])
    person, end = json.JSONDecoder().raw_decode(rest)  # the JSON document (may span lines)
    assert set(person) == {"name", "age"} and 0 <= person["age"] <= 120
    assert rest[end:].split() == []


@pytest.mark.slow
def test_usage_examples_run(tmp_path):
    assert blocks("python", USAGE)
    lines = run_python_blocks(USAGE, tmp_path)
    assert re.fullmatch(r"[0-9]{1,3}( \+ [0-9]{1,3})*", lines[0])              # the grammar's sum
    assert lines[1:] == ["True"]                                             # AtMostDigits
    assert (tmp_path / "run.html").stat().st_size > 1000                     # the program's genealogy page
