"""``python -m smc batch``: a whole job, one-line errors, and a real crash (SIGKILL of the
process mid-run) resumed by the same command with no custom_id missing or repeated."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from smc.api import cli
from smc.api.batch import run_batch
from tests.smc.api.batch_toys import answers, line, mixed_lines, read_lines, toy, write_lines
from tests.smc.api.toy_server import MODEL

ROOT = Path(__file__).resolve().parents[3]
TOY = ["--lm-factory", "tests.smc.api.batch_toys:toy", "--served-model-name", MODEL]


def test_batch_command_answers_every_line(tmp_path, capsys):
    inp = write_lines(tmp_path / "in.jsonl", mixed_lines(6) + [line("other", dict(line("x")["body"], model="m2"))])
    out = tmp_path / "out.jsonl"
    code = cli.main(["batch", "-i", str(inp), "-o", str(out), *TOY, "--quiet", "--concurrency", "3"])
    err = capsys.readouterr().err
    assert code == 0 and "7 answered (1 error lines)" in err and "every request has its line" in err
    run_batch(inp, tmp_path / "ref.jsonl", toy(), model_name=MODEL, progress=False)
    assert answers(out) == answers(tmp_path / "ref.jsonl")
    assert cli.main(["batch", "-i", str(inp), "-o", str(out), *TOY, "--quiet"]) == 0
    assert "0 answered (0 error lines), 7 already in" in capsys.readouterr().err


def test_batch_command_errors_are_one_line(tmp_path, capsys):
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"custom_id": "a"}\n{"custom_id": "a"}\n')
    out = tmp_path / "out.jsonl"
    assert cli.main(["batch", "-i", str(inp), "-o", str(out), *TOY]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "repeats the custom_id 'a'" in err and not out.exists()
    write_lines(inp, [line("a")])
    for argv, message in [
        (["--lm-factory", "nowhere:nothing"], "cannot load the LM factory"),
        (["--concurrency", "0"], "--concurrency must be >= 1"),
        (["--timeout", "-1"], "--timeout must be > 0"),
        (["--workers", "2"], "--workers and --gpus-per-worker are for --ray"),
        (["--lm-kwargs", "[1]"], "--lm-kwargs must be a JSON object"),
    ]:
        argv = ["batch", "-i", str(inp), "-o", str(out), *(argv if argv[0] == "--lm-factory" else TOY + argv)]
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err


def test_a_killed_process_is_resumed_by_the_same_command(tmp_path):
    lines = mixed_lines(16)
    inp = write_lines(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"
    argv = [sys.executable, "-m", "smc", "batch", "-i", str(inp), "-o", str(out), "--quiet",
            "--lm-factory", "tests.smc.api.batch_toys:slow_toy", "--lm-kwargs", '{"delay": 0.01}',
            "--served-model-name", MODEL, "--concurrency", "2"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and out.read_bytes().count(b"\n") >= 3:
            break
        time.sleep(0.02)
    assert proc.poll() is None, proc.stderr.read().decode()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stderr.close()
    first = read_lines(out)
    assert 3 <= len(first) < 16
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{len(first)} already in" in done.stderr and "every request has its line" in done.stderr
    ids = [x["custom_id"] for x in read_lines(out)]
    assert sorted(ids) == sorted(x["custom_id"] for x in lines)
    run_batch(inp, tmp_path / "ref.jsonl", toy(), model_name=MODEL, progress=False)
    assert answers(out) == answers(tmp_path / "ref.jsonl")
    assert json.loads(out.read_text().splitlines()[0])["custom_id"] == first[0]["custom_id"]
