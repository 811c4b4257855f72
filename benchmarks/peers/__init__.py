"""Runners for the peer engines of benchmarks/bench_sidebyside.py, each run in its own venv."""
