# The README's two commands: `make audit` and `make test`. Both set up .venv from scratch.
# Torch is installed FIRST (TORCH_SPEC; here torch==2.13.0 resolves to the local CPU wheel)
# so that no dependency ever pulls a CUDA build. Override, e.g.:
#   make test TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu121"
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.leakaudit-installed

.PHONY: setup audit epsilon-demo test lint bench results clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH_SPEC)
	$(PY) -m pip install --quiet -e ".[test,opacus,flower]"
	touch $(STAMP)

setup: $(STAMP)

# Main job on built-in data: the resilience audit of the baseline defenses on digits
# (prints the table; writes results/audit.{md,csv,tex,json,png}; resumes from
# results/results.jsonl if interrupted).
audit: setup
	$(PY) -m leakaudit audit --dataset digits --out results

# The accountant demo: every method side by side, constant and decaying sigma.
epsilon-demo: setup
	$(PY) -m accounting epsilon --q 0.01 --sigma 6 --steps 10000 --delta 1e-5
	$(PY) -m accounting epsilon --q 0.01 --sigma 15 --sigma-end 4.85 --schedule exponential --steps 10000 --delta 1e-5

# The extras are installed by setup, so their tests must run: a skip is a failure here.
test: setup
	$(PY) -m ruff check .
	LEAKAUDIT_REQUIRE_EXTRAS=1 $(PY) -m pytest -q

lint: setup
	$(PY) -m ruff check .

bench: setup
	$(PY) -m benchmarks.accounting_speed --profile quick

# The results page: the quick profiles (each under 5 minutes on 2 cores), then
# docs/results.md with their tables and figures.
results: setup
	$(PY) -m benchmarks.resilience --profile quick --out docs/results --results results/resilience.jsonl
	$(PY) -m benchmarks.privacy --profile quick --out docs/results
	$(PY) -m benchmarks.accounting_speed --profile quick --out docs/results
	$(PY) -m benchmarks.utility --profile quick --jobs 2 --out docs/results
	$(PY) -m benchmarks.speed --profile quick --out docs/results
	$(PY) -m benchmarks.empirical_privacy --profile quick --out docs/results --results results/empirical_privacy.jsonl
	$(PY) -m benchmarks.leakage_curves --profile quick --workers 2 --out docs/results
	$(PY) -m benchmarks.collect --dir docs/results --out docs/results.md

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .benchmarks
