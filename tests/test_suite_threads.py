"""The suite's own set-up: under pytest-xdist each worker's torch runs the threads tests/conftest.py
gave it (it must set OMP_NUM_THREADS before anything imports torch)."""

import os

import pytest
import torch


@pytest.mark.skipif("PYTEST_XDIST_WORKER_COUNT" not in os.environ, reason="not run under pytest-xdist")
def test_a_worker_runs_its_share_of_the_cores():
    assert torch.get_num_threads() == int(os.environ["OMP_NUM_THREADS"])
