# The whole set-up is `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow bench clean

$(STAMP): pyproject.toml
	@echo "== creating $(VENV) and installing sdbench with its pinned dependencies (about a minute, once)"
	@$(PY) -m venv $(VENV)
	@$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip
	@$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)
	@echo "== installed: $$($(BIN)/sdbench --version)"

demo: $(STAMP)
	@echo "== sdbench run: the default scenario (ESP-IDF perf_benchmark on a simulated ESP32 SDMMC card)"
	$(BIN)/sdbench run

test: $(STAMP)
	$(BIN)/python -m pytest

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
