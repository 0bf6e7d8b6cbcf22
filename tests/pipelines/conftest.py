"""Orchestrator tests: each module needs its extra, installed into its own venv by ``make test``
(``.venv-airflow``, ``.venv-prefect``, ``.venv-dbos``); tests/test_pipelines.py runs each module with
its venv's Python. The main suite's interpreter has no orchestrator: it does not collect them here
(they are not skipped: the subprocess run is a test of the main suite and fails when they fail).
"""

from __future__ import annotations

import importlib.util

MODULES = {"test_airflow.py": "airflow", "test_prefect.py": "prefect", "test_dbos.py": "dbos"}
collect_ignore = [f for f, mod in MODULES.items() if importlib.util.find_spec(mod) is None]
