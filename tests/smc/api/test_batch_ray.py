"""The batch runner on a local Ray instance (two one-CPU workers, a toy LM built in each from
its import path): the same output as one process, and a complete output when a worker is
killed mid-run."""

from __future__ import annotations

from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install smc-steer[ray])")

from smc.api.batch import run_batch  # noqa: E402
from smc.api.batch_ray import WORKER_NAME, plan, run_batch_ray  # noqa: E402
from tests.smc.api.batch_toys import answers, line, mixed_lines, read_lines, toy, write_lines  # noqa: E402
from tests.smc.api.toy_server import MODEL  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
FACTORY = "tests.smc.api.batch_toys:slow_toy"


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray of two CPUs whose workers import this checkout (smc and the tests)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}})
    yield
    ray.shutdown()


def test_plan_one_worker_per_gpu_or_per_cpus():
    assert plan({"CPU": 16, "GPU": 4}, None, 1, None).workers == 4
    assert plan({"CPU": 16, "GPU": 4}, None, 1, 2).workers == 2
    assert plan({"CPU": 16}, None, 4, None) == plan({"CPU": 16}, None, 4, 0)
    assert plan({"CPU": 16}, None, 4, None).workers == 4
    assert plan({"CPU": 2}, 3, 1, None).workers == 3


def test_ray_output_equals_one_process(local_ray, tmp_path):
    inp = write_lines(tmp_path / "in.jsonl", mixed_lines(10) + [line("bad", {"prompt": 3}, url="/v1/completions")])
    run_batch(inp, tmp_path / "one.jsonl", toy(), model_name=MODEL, progress=False)
    summary = run_batch_ray(inp, tmp_path / "ray.jsonl", FACTORY, model_name=MODEL, workers=2,
                            in_flight=3, progress=False)
    assert summary.complete and summary.succeeded == 10 and summary.failed == 1
    assert answers(tmp_path / "ray.jsonl") == answers(tmp_path / "one.jsonl")


def test_a_killed_worker_still_yields_a_complete_output(local_ray, tmp_path):
    lines = mixed_lines(16)
    inp = write_lines(tmp_path / "in.jsonl", lines)
    run_batch(inp, tmp_path / "one.jsonl", toy(), model_name=MODEL, progress=False)
    seen = []

    def kill_one(answer):
        seen.append(answer.custom_id)
        if len(seen) == 3:
            ray.kill(ray.get_actor(WORKER_NAME.format(0)))

    out = tmp_path / "ray.jsonl"
    summary = run_batch_ray(inp, out, FACTORY, (0.01,), model_name=MODEL, workers=2, in_flight=3,
                            progress=False, on_answer=kill_one, max_restarts=0)
    assert summary.complete and summary.failed == 0 and summary.reassigned >= 1
    ids = [x["custom_id"] for x in read_lines(out)]
    assert sorted(ids) == sorted(x["custom_id"] for x in lines)  # each exactly once
    assert answers(out) == answers(tmp_path / "one.jsonl")


def test_a_factory_that_fails_is_one_clear_error(local_ray, tmp_path):
    inp = write_lines(tmp_path / "in.jsonl", [line("a")])
    with pytest.raises(RuntimeError, match="could not build the LM.*no such model"):
        run_batch_ray(inp, tmp_path / "out.jsonl", "tests.smc.api.batch_toys:broken",
                      model_name=MODEL, workers=1, progress=False)
    assert read_lines(tmp_path / "out.jsonl") == []


def test_the_cli_runs_a_job_on_ray(local_ray, tmp_path, capsys):
    from smc.api import cli

    inp = write_lines(tmp_path / "in.jsonl", mixed_lines(6))
    out = tmp_path / "out.jsonl"
    code = cli.main(["batch", "-i", str(inp), "-o", str(out), "--ray", "--workers", "2",
                     "--lm-factory", "tests.smc.api.batch_toys:toy", "--served-model-name", MODEL, "--quiet"])
    assert code == 0 and "every request has its line" in capsys.readouterr().err
    run_batch(inp, tmp_path / "one.jsonl", toy(), model_name=MODEL, progress=False)
    assert answers(out) == answers(tmp_path / "one.jsonl")
