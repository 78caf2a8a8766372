# The two commands of README.md: `make run` and `make test`. Both install what they need.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint system-deps

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,spark]'
	touch $(STAMP)

system-deps:
	bash scripts/install-system-deps.sh

run: $(STAMP)
	$(VENV)/bin/lmq serve --data-dir ./lmq-data

test: $(STAMP) system-deps
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .
