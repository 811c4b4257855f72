import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (seeded, no example database): a failure
# reproduces, and the suite's time does not depend on what an earlier run stored.
settings.register_profile("seeded", derandomize=True, database=None)
settings.load_profile("seeded")


@pytest.fixture(scope="session")
def embedded_lm():
    """The embedded SmolLM2-135M-Instruct backend (``smc.load_lm()``), loaded once per session."""
    from smc.loading import load_lm

    return load_lm()
