"""Tooling holds: strict mypy and ruff from pyproject.toml are clean, the public core API is documented,
the installed `wap` script is the CLI, and the core never imports streamlit."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
import subprocess
import sys
from importlib.metadata import entry_points, version
from pathlib import Path

import yaml

import wap_core

ROOT = Path(__file__).resolve().parent.parent


def _run(
    *args: str, env: dict[str, str] | None = None, timeout: int = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def test_mypy_strict_from_project_config_is_clean() -> None:
    # no arguments: files (wap_core, pages, app.py) and strict mode come from pyproject.toml
    p = _run(sys.executable, "-m", "mypy")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "no issues found" in p.stdout


def test_mypy_config_covers_core_pages_and_app_strictly() -> None:
    import tomllib

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert cfg["strict"] is True
    assert set(cfg["files"]) >= {"wap_core", "pages", "app.py"}
    assert not any(o.get("ignore_errors") for o in cfg.get("overrides", []))


def test_ruff_lint_and_format_are_clean() -> None:
    check = _run(sys.executable, "-m", "ruff", "check", ".")
    assert check.returncode == 0, check.stdout + check.stderr
    fmt = _run(sys.executable, "-m", "ruff", "format", "--check", ".")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_pre_commit_config_is_valid_and_local() -> None:
    p = _run(sys.executable, "-m", "pre_commit", "validate-config", ".pre-commit-config.yaml")
    assert p.returncode == 0, p.stdout + p.stderr
    cfg = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    assert [r["repo"] for r in cfg["repos"]] == ["local"]  # nothing is cloned from the network
    ids = {h["id"] for h in cfg["repos"][0]["hooks"]}
    assert ids == {"ruff-check", "ruff-format", "mypy"}


def test_wap_script_is_the_cli(tmp_path: Path) -> None:
    wap = Path(sys.executable).parent / "wap"
    assert wap.is_file(), f"{wap} is missing: `make setup` installs the project (pip install --no-deps -e .)"
    assert [ep.value for ep in entry_points(group="console_scripts", name="wap")] == ["wap_core.cli:main"]
    assert version("wap-console") == wap_core.__version__  # pyproject.toml reads it from wap_core
    # This checkout's wap_core for both (the editable install may point at another checkout of the repo).
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WAP_HOME": str(tmp_path / "home"), "WAP_USER": "ada"}
    for args in (["--help"], ["whoami", "--json"]):
        script = _run(str(wap), *args, env=env, timeout=120)
        module = _run(sys.executable, "-m", "wap_core", *args, env=env, timeout=120)
        assert script.returncode == module.returncode == 0, script.stderr + module.stderr
        assert script.stdout == module.stdout
        assert script.stdout
    assert '"user": "ada"' in script.stdout


def _undocumented() -> list[str]:
    """Public functions, classes and methods of wap_core without a docstring (an override inherits one)."""
    missing = []
    for f in sorted((ROOT / "wap_core").rglob("*.py")):
        rel = f.relative_to(ROOT)
        if "migrations" in rel.parts:  # Alembic revision scripts, not API
            continue
        module = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        for node in ast.parse(f.read_text()).body:
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            if node.name.startswith("_"):
                continue
            if any(getattr(d, "id", getattr(d, "attr", None)) == "overload" for d in node.decorator_list):
                continue  # an @overload signature: the implementation below carries the docstring
            if not isinstance(node, ast.ClassDef):
                if ast.get_docstring(node) is None:
                    missing.append(f"{rel}:{node.lineno} {node.name}")
            else:
                if ast.get_docstring(node) is None:
                    missing.append(f"{rel}:{node.lineno} class {node.name}")
                cls = None
                for m in node.body:
                    if not isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) or m.name.startswith("_"):
                        continue
                    if ast.get_docstring(m) is not None:
                        continue
                    cls = cls or getattr(importlib.import_module(module), node.name)
                    inherited = any(
                        m.name in vars(base) and inspect.getdoc(vars(base)[m.name])
                        for base in cls.__mro__[1:]
                        if base.__module__.startswith("wap_core")
                    )
                    if not inherited:
                        missing.append(f"{rel}:{m.lineno} {node.name}.{m.name}")
    return missing


def test_public_core_api_is_documented() -> None:
    missing = _undocumented()
    assert not missing, "undocumented public API:\n" + "\n".join(missing)


def test_core_never_imports_streamlit() -> None:
    offenders = [
        str(f.relative_to(ROOT)) for f in (ROOT / "wap_core").rglob("*.py") if "streamlit" in f.read_text()
    ]
    assert offenders == []


def test_no_untyped_mapping_crosses_a_signature_unless_named() -> None:
    """Issue 26 item 3: the core's untyped payloads are JSON-shaped and each is named by a type alias
    (``values.JsonObject`` / ``JsonMapping`` / ``Record``, an argparse option set, a JVM proxy): a bare
    ``dict[str, Any]`` or ``Mapping[str, Any]`` appears only where such an alias is defined."""
    core = Path(__file__).resolve().parents[1] / "wap_core"
    bare = re.compile(r"\b(?:dict|Mapping)\[str, Any\]")
    found = [
        f"{p.relative_to(core)}:{n}: {line.strip()}"
        for p in sorted(core.rglob("*.py"))
        if "migrations" not in p.parts
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if bare.search(line) and ": TypeAlias = " not in line
    ]
    assert found == [], "name the payload by a type alias:\n" + "\n".join(found)
