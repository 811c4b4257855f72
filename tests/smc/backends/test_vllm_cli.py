"""The command line with the vLLM backend: an answer, and no engine process left behind once it
exits. Its own file so that pytest-xdist's ``--dist loadfile`` runs it beside
test_vllm_backend.py's session engine (each starts a vLLM engine: about 40 s on a CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("vllm")
psutil = pytest.importorskip("psutil")

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # the CLI loads the embedded model

ROOT = Path(__file__).resolve().parents[3]


def _engine_processes_after(cmd: list[str], timeout: float = 600) -> tuple[str, list[int]]:
    """Run ``cmd``; return its stdout and the ids of its descendant processes still alive
    a few seconds after it exited."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seen: set[int] = set()
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            seen |= {c.pid for c in parent.children(recursive=True)}
        except psutil.NoSuchProcess:
            break
        time.sleep(0.5)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert seen, "the command started no child process (no vLLM engine?)"
    time.sleep(3)

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    return out, [p for p in seen if alive(p)]


def test_cli_generate_with_vllm_and_no_leaked_processes():
    out, left = _engine_processes_after([
        sys.executable, "-m", "smc", "generate", "--backend", "vllm", "--prompt",
        "Give me a three-digit number.", "--regex", "[0-9]{3}", "--particles", "4",
        "--max-tokens", "6", "--seed", "0", "--json", "--quiet",
    ])
    assert not left, f"vLLM processes left after the CLI exited: {left}"
    # vLLM may log to stdout too; the result is the one JSON line.
    result = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    texts = [s["text"] for s in result["samples"] if s["finished"]]
    assert texts and all(len(t) == 3 and t.isdigit() for t in texts)
    assert result["log_ml"] > float("-inf")
