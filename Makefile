# The two set-up commands of README.md. Both create (or reuse) a virtual environment with the CPU
# build of torch, install PropMe into it (a real wheel install, so lm-eval's start-up hook works),
# then run the demo or the tests.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
DEPS := $(VENV)/.propme-deps

.PHONY: demo test test-fast test-lmeval-oldest lint install bench pictures clean

$(DEPS): setup.cfg setup.py pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q ".[lmeval,test,ray]" $(LMEVAL_PIN)
	touch $@

# PropMe itself, reinstalled only when a file of the wheel (or a folder of them: a deleted file) is newer
# than the last install: the inner loop does not rebuild an unchanged wheel
WHEEL_SOURCES := $(shell find propme propme_metrics propme_tasks task_configs -not -path '*/__pycache__*' -not -name '*.pyc' -not -name '*.so') \
	setup.cfg setup.py pyproject.toml propme_lmeval.pth
INSTALLED := $(VENV)/.propme-installed

# the native search is also compiled in place (`propme_metrics/index/native_ext*.so`, ignored by git): tests
# and benchmarks run from the checkout import the package from here
$(INSTALLED): $(DEPS) $(WHEEL_SOURCES)
	rm -rf build
	$(BIN)/pip install -q --no-deps --force-reinstall .
	$(BIN)/python setup.py -q build_ext --inplace || echo "native search not compiled: the numpy search is used"
	rm -rf build
	touch $@

install: $(INSTALLED)

demo: install
	$(BIN)/propme demo $(DEMO_ARGS)

# the tests start many Python processes: each would compile PropMe's modules from source again where the
# environment turns Python's bytecode cache off (PYTHONDONTWRITEBYTECODE, set on some machines), so the
# test runs keep it on (the __pycache__ folders are ignored by git)
BYTECODE_ON := PYTHONDONTWRITEBYTECODE=
PYTEST := $(BYTECODE_ON) $(BIN)/python -m pytest

test: install
	$(PYTEST) $(PYTEST_ARGS)

# the inner loop: every test but the slow ones (setup.cfg's `slow` marker: stock lm_eval runs, the demo model,
# Ray, Chromium, fresh processes killed from outside), on two processes (pytest-xdist; each takes half the
# tests in order and steals from the other when done, so few module fixtures are built twice; FAST_WORKERS=0
# runs them in this one)
FAST_WORKERS ?= 2
test-fast: install
	$(PYTEST) -m "not slow" -n $(FAST_WORKERS) --dist worksteal $(PYTEST_ARGS)

# CI's second run: the oldest lm-eval release setup.cfg admits (its `lm-eval[hf]>=` bound), in a venv of its
# own, on a smoke subset: one stock `lm_eval` run of the demo tasks and lm-eval's conformance checks
LMEVAL_OLDEST := $(shell sed -n 's/^ *lm-eval\[hf\]>=\([0-9.]*\),.*/\1/p' setup.cfg)
OLDEST_VENV := .venv-lmeval-$(LMEVAL_OLDEST)
LMEVAL_SMOKE := tests/tasks/test_lmeval_conformance.py tests/tasks/test_tasks.py::test_end_to_end_through_stock_lm_eval
test-lmeval-oldest:
	$(MAKE) install VENV=$(OLDEST_VENV) LMEVAL_PIN="lm-eval[hf]==$(LMEVAL_OLDEST)"
	$(BYTECODE_ON) $(OLDEST_VENV)/bin/python -m pytest $(LMEVAL_SMOKE) $(PYTEST_ARGS)

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
	rm -rf $(VENV) .venv-lmeval-* build *.egg-info propme-demo propme_metrics/index/native_ext*.so
