# The README's two commands: `make audit` and `make test`. Both set up .venv from scratch.
# `make audit` installs only what the audit needs (torch, numpy, scipy, scikit-learn/-image,
# prv-accountant, matplotlib, tqdm); `make test` and `make setup-all` add every extra
# (test tools and peers, Opacus, Flower with its Ray, the docs tools).
# Torch is installed FIRST (TORCH_SPEC; here torch==2.13.0 resolves to the local CPU wheel)
# so that no dependency ever pulls a CUDA build. Override, e.g.:
#   make test TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu121"
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.leakaudit-installed
STAMP_ALL := $(VENV)/.leakaudit-installed-all
STAMP_DOCS := $(VENV)/.leakaudit-installed-docs
export NO_MKDOCS_2_WARNING := 1
# Bytecode caches (__pycache__/, ignored by git) are written even where the environment sets
# PYTHONDONTWRITEBYTECODE: without them every pytest worker recompiles the package and
# rewrites every test module's asserts on every run (about 9 of a worker's 15 s of
# collection on 2 cores; docs/results.md, "Test suite"). setup compiles the package once.
export PYTHONDONTWRITEBYTECODE :=

.PHONY: setup setup-all audit epsilon-demo test test-fast test-sweeps docs lint bench results clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH_SPEC)
	$(PY) -m pip install --quiet -e .
	$(PY) -m compileall -q accounting leakaudit benchmarks
	touch $(STAMP)

$(STAMP_DOCS): $(STAMP)
	$(PY) -m pip install --quiet -e ".[docs]"
	touch $(STAMP_DOCS)

$(STAMP_ALL): $(STAMP)
	$(PY) -m pip install --quiet -e ".[test,opacus,flower,docs]"
	touch $(STAMP_ALL) $(STAMP_DOCS)

# what `make audit` needs
setup: $(STAMP)

# every extra: what `make test` needs
setup-all: $(STAMP_ALL)

# Main job on built-in data: the protection profile of the baseline defenses on digits
# (attacks, measured eps lower bounds, identification beside its bound; prints the table;
# writes results/audit.{md,csv,tex,json,png}; resumes from results/results.jsonl if
# interrupted).
audit: setup
	$(PY) -m leakaudit audit --dataset digits --empirical 300 --identify 100 --out results

# The accountant demo: every method side by side, constant and decaying sigma.
epsilon-demo: setup
	$(PY) -m accounting epsilon --q 0.01 --sigma 6 --steps 10000 --delta 1e-5
	$(PY) -m accounting epsilon --q 0.01 --sigma 15 --sigma-end 4.85 --schedule exponential --steps 10000 --delta 1e-5

# The extras are installed by setup-all, so their tests must run: a skip is a failure here.
# pytest-xdist runs one worker per core (-n auto); each worker uses one torch thread.
test: setup-all
	$(PY) -m ruff check .
	LEAKAUDIT_REQUIRE_EXTRAS=1 $(PY) -m pytest -q -n auto --dist loadfile

# The suite without the tests marked slow (the integration tests), hypothesis at 8 examples
# per property: about 60 s on 2 quiet cores (docs/results.md, "Test suite").
test-fast: setup-all
	HYPOTHESIS_PROFILE=fast $(PY) -m pytest -q -n auto --dist loadfile -m "not slow"

# The statistical sweeps behind docs/results.md (every seed, 10,000 runs per side): slow
test-sweeps: setup-all
	LEAKAUDIT_REQUIRE_EXTRAS=1 $(PY) -m pytest -q -n auto --dist loadfile -m sweep --sweeps

# The documentation site (docs/, API reference from the docstrings) into site/; a broken
# link, page or reference fails the build.
docs: $(STAMP_DOCS)
	$(PY) -m mkdocs build --strict

lint: setup-all
	$(PY) -m ruff check .

bench: setup-all
	$(PY) -m benchmarks.accounting_speed --profile quick

# The results page: the quick profiles, then docs/results.md with their tables and figures
# (the accounting and speed benchmarks compare against the peers: setup-all).
results: setup-all
	$(PY) -m benchmarks.resilience --profile quick --out docs/results --results results/resilience.jsonl
	$(PY) -m benchmarks.privacy --profile quick --out docs/results
	$(PY) -m benchmarks.accounting_speed --profile quick --out docs/results
	$(PY) -m benchmarks.utility --profile quick --jobs 2 --out docs/results
	$(PY) -m benchmarks.speed --profile quick --out docs/results
	$(PY) -m benchmarks.empirical_privacy --profile quick --out docs/results --results results/empirical_privacy.jsonl
	$(PY) -m benchmarks.leakage_curves --profile quick --workers 2 --out docs/results
	$(PY) -m benchmarks.collect --dir docs/results --out docs/results.md

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .benchmarks site
