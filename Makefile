# The two set-up commands of README.md. Both create (or reuse) a virtual environment with the CPU
# build of torch, install PropMe into it (a real wheel install, so lm-eval's start-up hook works),
# then run the demo or the tests.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
DEPS := $(VENV)/.propme-deps

.PHONY: demo test test-fast lint install bench pictures clean

$(DEPS): setup.cfg setup.py pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q ".[lmeval,test,ray]"
	touch $@

install: $(DEPS)
	rm -rf build
	$(BIN)/pip install -q --no-deps --force-reinstall .

demo: install
	$(BIN)/propme demo $(DEMO_ARGS)

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# the inner loop: every test but the slow ones (stock lm_eval runs, the demo model, Ray, Chromium)
test-fast: install
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

# ruff (pyproject.toml) and the import layers (setup.cfg [importlinter]); CI runs it before the tests
lint: $(DEPS)
	$(BIN)/ruff check .
	$(BIN)/lint-imports setup.cfg

bench: install
	$(BIN)/python benchmarks/index_build.py
	$(BIN)/python benchmarks/trace.py
	$(BIN)/python benchmarks/startup.py

# README's pictures (docs/images/): the demo's capability plot and headless-Chromium screenshots of its report.html and leaderboard.html
pictures: install
	$(BIN)/python docs/pictures.py

clean:
	rm -rf $(VENV) build *.egg-info propme-demo
