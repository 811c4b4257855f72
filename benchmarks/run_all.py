"""Run every benchmarks/bench_*.py in turn (what `make bench` does) and say where each stands.

Each script runs in its own process with this interpreter, so one crash does not stop the rest;
the exit status is 1 if any script failed. A script whose optional dependency is missing (vLLM)
is skipped with the command that runs it. Figures go to stdout; the scripts' own docstrings say
what they measure, and benchmarks/RESULTS.md records the latest figures.

    python benchmarks/run_all.py [--only NAME ...] [--list]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
# script stem -> (module it needs, how to run it when that module is not in this environment)
NEEDS = {"bench_vllm": ("vllm", "make test-vllm first, then .venv-vllm/bin/python benchmarks/bench_vllm.py"),
         "bench_quantization": ("bitsandbytes", "pip install 'smc-steer[quantization]', then rerun it"),
         "bench_adapters": ("peft", "pip install 'smc-steer[adapters]', then rerun it")}


def scripts(only: list[str] | None = None) -> list[Path]:
    """bench_*.py in name order; ``only`` keeps those whose stem (with or without bench_) is listed."""
    found = sorted(HERE.glob("bench_*.py"))
    if only:
        wanted = {o.removeprefix("bench_").removesuffix(".py") for o in only}
        unknown = wanted - {p.stem.removeprefix("bench_") for p in found}
        if unknown:
            raise SystemExit(f"unknown benchmark(s): {', '.join(sorted(unknown))}; "
                             f"have: {', '.join(p.stem for p in found)}")
        found = [p for p in found if p.stem.removeprefix("bench_") in wanted]
    return found


def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="+", help="run only these benchmarks (e.g. potentials)")
    ap.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = ap.parse_args()
    todo = scripts(args.only)
    if args.list:
        for p in todo:
            print(p.stem)
        return 0
    print(f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit()}, "
          f"{cpu_name()} ({os.cpu_count()} CPUs), "
          f"Python {platform.python_version()}", flush=True)
    status: dict[str, str] = {}
    for p in todo:
        need = NEEDS.get(p.stem)
        if need and importlib.util.find_spec(need[0]) is None:
            status[p.stem] = f"skipped ({need[0]} not installed: {need[1]})"
            print(f"\n== {p.stem}: {status[p.stem]}", flush=True)
            continue
        print(f"\n== {p.stem}", flush=True)
        t = time.perf_counter()
        rc = subprocess.run([sys.executable, str(p)], cwd=HERE.parent).returncode
        status[p.stem] = f"{'ok' if rc == 0 else f'FAILED (exit {rc})'} in {time.perf_counter() - t:.0f} s"
    print("\n== summary")
    for name, s in status.items():
        print(f"{name}: {s}")
    return int(any(s.startswith("FAILED") for s in status.values()))


if __name__ == "__main__":
    sys.exit(main())
