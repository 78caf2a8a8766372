# The two commands of README.md: `make run` and `make check`. Both install what they need:
# `make run` the gateway's own dependencies only, `make check` also the test and Spark
# extras (pytest, the protocol clients the tests drive, ruff, mypy; PySpark and its JVM).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXTRAS_STAMP := $(VENV)/.installed-extras
NODE_STAMP := tests/node/node_modules/.installed

.PHONY: run check test lint build system-deps

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	LMQ_NO_EXTENSIONS=1 $(PY) -m pip install -q -e .
	touch $(STAMP)

$(EXTRAS_STAMP): $(STAMP)
	LMQ_NO_EXTENSIONS=1 $(PY) -m pip install -q -e '.[test,spark]'
	touch $(EXTRAS_STAMP)

# The compiled modules (setup.py's COMPILED, mypyc), built in place beside their sources,
# and again whenever one of those sources changes (the tests refuse a stale one).
COMPILED_SOURCES := $(shell sed -n 's/^ *"\([a-z_/]*\.py\)",$$/\1/p; s/^ *"[a-z_.]*": "\([a-z_/]*\.c\)",$$/\1/p' setup.py)
BUILT := $(VENV)/.built

$(BUILT): $(STAMP) setup.py $(COMPILED_SOURCES)
	$(PY) -m pip install -q -e . --no-deps
	touch $(BUILT)

build: $(BUILT)

system-deps:
	bash scripts/install-system-deps.sh

# ali-ons, rocketmq-client-nodejs and their dependencies, exactly as
# tests/node/package-lock.json pins them; again only when the lockfile changes.
$(NODE_STAMP): tests/node/package-lock.json
	bash scripts/install-node-deps.sh

# Flags for lmq serve: make run ARGS='--grpc-port 0 --mqtt-port 11883'
ARGS ?=
run: $(BUILT)
	$(VENV)/bin/lmq serve --data-dir ./lmq-data $(ARGS)

# The whole check, as CI runs it: lint first (a lint failure stops here), then the tests.
check: lint test

# Four pytest-xdist workers on any machine: the suite waits on sockets, subprocesses and
# timers far more than it computes (about 12 CPU minutes in 30 serial minutes on 2
# cores), so four share two cores well. Module fixtures stay on one worker and the Spark
# tests share one (tests/conftest.py). TEST_WORKERS=0 runs serially.
TEST_WORKERS ?= 4

# Then the protocol tests again on the Python sources of the compiled modules.
test: $(BUILT) $(EXTRAS_STAMP) system-deps $(NODE_STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=25
	LMQ_NO_EXTENSIONS=1 $(PY) -m pytest -n $(TEST_WORKERS) -q tests/protocol

# ruff (style and bugs), mypy over every package (zero errors), import contracts
# (the layering of docs/architecture.md, [tool.importlinter] in pyproject.toml).
lint: $(EXTRAS_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
