"""Issue 26 item 7: the package metadata declares what wap_core imports, and nothing it does not use."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# imported only by wap_core.integrations, each behind its own optional extra (never the core install)
EXTRAS = {"airflow", "prefect", "dbos"}
# declared and loaded by name, not imported: SQLAlchemy's driver for postgresql:// catalog URLs
LOADED_BY_NAME = {"psycopg2-binary"}


def _top_level_imports(files: list[Path]) -> set[str]:
    found: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {
        m for m in found if m not in sys.stdlib_module_names and m not in ("wap_core", "pages", "_typeshed")
    }


def _distributions(modules: set[str]) -> set[str]:
    names = packages_distributions()
    return {names[m][0].lower() for m in modules if m in names}


def _declared() -> set[str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {re.split(r"[\[<>=!~ ;]", d, maxsplit=1)[0].lower() for d in deps}


def test_every_import_of_wap_core_is_a_declared_dependency() -> None:
    modules = _top_level_imports(list((ROOT / "wap_core").rglob("*.py"))) - EXTRAS
    unknown = {m for m in modules if m not in packages_distributions()}
    assert unknown == set(), f"imported but not installed: {sorted(unknown)}"
    assert _distributions(modules) - _declared() == set(), "wap_core imports it: declare it in pyproject.toml"


def test_every_declared_dependency_is_used() -> None:
    core = _top_level_imports(list((ROOT / "wap_core").rglob("*.py")))
    console = _top_level_imports([ROOT / "app.py", *(ROOT / "pages").glob("*.py")])
    used = _distributions(core | console) | {d.lower() for d in LOADED_BY_NAME}
    assert _declared() - used == set(), "declared but neither wap_core nor the console imports it"
