"""The orchestrator extras' tests, each in its own venv (``make pipelines-setup``; part of ``make test``).

Airflow, Prefect and DBOS pin libraries the console pins too, so each is installed into ``.venv-<name>``
from ``requirements-<name>.txt``; here each ``tests/pipelines/test_<name>.py`` runs with that venv's
Python, against the same real Spark/Iceberg (and, for DBOS, this run's PostgreSQL). A missing venv is a
failure naming the make target, never a skip; so is any skipped test in the subprocess. This process only
waits for those runs: they run in the background lane (``BACKGROUND``; tests/helpers.py ``Lane``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import BackendRun, Lane

ROOT = Path(__file__).resolve().parent.parent
ORCHESTRATORS = ("airflow", "prefect", "dbos")


def _pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            out[re.sub(r"\[.*\]", "", name).lower()] = version
    return out


@pytest.mark.parametrize("name", ORCHESTRATORS)
def test_the_extra_pins_wap_cores_runtime_as_the_main_venv(name: str) -> None:
    main = _pins(ROOT / "requirements.txt")
    extra = _pins(ROOT / f"requirements-{name}.txt")
    shared = {k: v for k, v in extra.items() if k in main}
    assert {"pyspark", "pyiceberg", "snowpark-connect-deps-iceberg", "sqlalchemy", "pytest"} <= set(shared)
    assert shared == {k: main[k] for k in shared}


def test_the_core_install_pulls_no_orchestrator() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"]).lower()
    assert not any(o in core for o in ("airflow", "prefect", "dbos"))
    assert set(ORCHESTRATORS) <= set(project["optional-dependencies"])


def _orchestrator_run(lane: Lane, params: dict[str, object]) -> None:
    """``tests/pipelines/test_<name>.py`` with that venv's Python, in the background lane (tests/helpers.py
    ``Lane``): this process only waits for it."""
    name = str(params["name"])
    python = ROOT / f".venv-{name}" / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: run `make pipelines-setup` (make test does)")
    env = dict(lane.environ)  # as the session began (tests patch os.environ meanwhile)
    env.pop("PYSPARK_PYTHON", None)  # the venv's own Python runs Spark's Python workers
    if name == "dbos":
        env["WAP_TEST_POSTGRES_URL"] = lane.postgres
    # every test of the module runs and passes; none skipped (BackendRun.finish judges the junit report)
    BackendRun(
        [f"tests/pipelines/test_{name}.py"], "local-sqlite", env=env, tmp=lane.tmp(name), python=python
    ).finish(timeout=1800, run=f"{name} run", failed_on=f"the {name} venv", min_tests=1)


BACKGROUND = {"test_orchestrator": _orchestrator_run}


@pytest.mark.parametrize("name", ORCHESTRATORS)
def test_orchestrator(name: str, background: Callable[[float], object]) -> None:
    background(2400)
