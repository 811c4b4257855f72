import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Under pytest-xdist (`make test`: one worker per core) each worker's torch, and the processes it
# starts, get their share of the cores rather than all of them: two workers each running two
# spinning BLAS threads on two cores ran the model tests 2.1-2.4 times slower (405-476 s against
# 196 s for tests/smc/backends and test_tokenization_sum.py). Set before anything imports torch.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
if _WORKERS:
    # the cores this process may run on (a container's CPU set), not the host's
    _CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _CORES // _WORKERS)))

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (seeded, no example database): a failure
# reproduces, and the suite's time does not depend on what an earlier run stored.
settings.register_profile("seeded", derandomize=True, database=None)
settings.load_profile("seeded")


@pytest.fixture(scope="session")
def embedded_lm():
    """The embedded SmolLM2-135M-Instruct backend (``smc.load_lm()``), loaded once per session."""
    from smc.backends.loading import load_lm

    return load_lm()


# Every test that loads the embedded model is marked `slow` (so `-m "not slow"` is a fast run that
# really loads no model): checked at collection for the fixture, and at run time for direct loads.
def pytest_collection_modifyitems(config, items):
    unmarked = [it.nodeid for it in items
                if "embedded_lm" in getattr(it, "fixturenames", ()) and it.get_closest_marker("slow") is None]
    if unmarked:
        raise pytest.UsageError(
            "tests that use the embedded model must be marked @pytest.mark.slow: " + ", ".join(unmarked[:10])
        )


@pytest.fixture(autouse=True)
def _embedded_model_needs_slow_marker(request, monkeypatch):
    if request.node.get_closest_marker("slow") is not None:
        return
    import smc.backends.loading

    def refuse(*args):
        raise RuntimeError(f"{request.node.nodeid} loads the embedded model but is not marked @pytest.mark.slow")

    # The package lookup before it still runs, so an unmarked test can check the install hint.
    monkeypatch.setattr(smc.backends.loading, "_converted_dir", refuse)
