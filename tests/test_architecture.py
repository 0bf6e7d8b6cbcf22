"""The house rules of wap_core, checked on its source (an import-linter style contract, no extra tool).

- **Layers**: a module imports only modules of its own layer or of the layers below it (runtime
  imports; ``if TYPE_CHECKING:`` imports are annotations and may point anywhere).
- **No import circle** between modules.
- **No function-level import** of a wap_core module (an import inside a function hides a circle).
- **No Streamlit** in the core; every package says what it is for in its docstring.
- **The faces call one API**: the console (``app.py``, ``pages/``), the CLI (``wap_core.cli``), the pipeline
  API and the integrations import only the facade :mod:`wap_core.api` and the base modules (exceptions,
  identifiers, states, values, config), plus their own face's modules; the integrations also the pipeline
  API they wrap. ``pages/`` and ``app.py`` import no project module inside a function either.
- **The whole import picture** (type-only and function-level imports included, ``bench/`` too) has no circle
  and, in wap_core, no arrow running up.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "wap_core"

# Top to bottom. A module belongs to the first layer one of whose prefixes it starts with.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("wap_core.__main__", "wap_core.cli"),
    ("wap_core.integrations",),  # orchestrator operators (optional extras)
    ("wap_core.pipeline",),  # the Python API for pipelines
    ("wap_core.api",),  # the facade: start-up, identity, every action and read the faces call
    ("wap_core.workflow",),  # actions: validate, authorize, move refs, journal, notify
    ("wap_core.analysis",),  # read-only looks at a branch (diff, keyed diff, explore)
    ("wap_core.session",),  # the one door for side effects: authorizes, journals, refuses, notifies
    ("wap_core.lakehouse",),  # the factory tying settings, catalog, journal and Spark
    ("wap_core.notify",),  # events, outbox, delivery (given a journal and settings)
    ("wap_core.lake", "wap_core.store", "wap_core.checks", "wap_core.security"),
    (
        "wap_core.config",
        "wap_core.exceptions",
        "wap_core.identifiers",
        "wap_core.states",
        "wap_core.values",
        "wap_core.durations",
        "wap_core.faults",
        "wap_core.samples",
        "wap_core.yamlnodes",
        "wap_core.registry",
        "wap_core.actions",  # every action's declaration, plain data (the layers above read it)
    ),
)
FACADE = "wap_core"  # the package root re-exports Lakehouse, Settings, TableId for users; not a layer


def _modules() -> dict[str, Path]:  # wap_core's modules by dotted name
    out: dict[str, Path] = {}
    for p in CORE.rglob("*.py"):
        if "migrations" in p.parts:
            continue  # Alembic scripts, run by the migration tool
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = p
    return out


MODULES = _modules()


def _faces() -> dict[str, Path]:
    """The console's scripts (``app.py``, ``pages/*.py``): faces of their own, outside the package."""
    out = {"app": ROOT / "app.py"}
    out.update({f"pages.{p.stem}": p for p in sorted((ROOT / "pages").glob("*.py"))})
    return out


CONSOLE = _faces()
BENCH = {f"bench.{p.stem}".removesuffix(".__init__"): p for p in sorted((ROOT / "bench").glob("*.py"))}
KNOWN: dict[str, Path] = {**MODULES, **CONSOLE, **BENCH}


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The project modules (wap_core, the console's, bench's) an import statement of ``module`` names."""
    known = KNOWN
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    if node.level:
        base = module.split(".")
        if known[module].name != "__init__.py":
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join([*base, *([node.module] if node.module else [])])
    else:
        target = node.module or ""
    subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known]
    if subs and len(subs) == len(node.names):
        return subs  # ``from pkg import mod``: the modules, not the package's __init__
    return [t for t in [target, *subs] if t in known]


def _runtime_imports(module: str) -> set[str]:
    """Imports executed when ``module`` is imported (module level, ``if``/``try`` blocks; not TYPE_CHECKING)."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.update(t for t in _targets(module, node) if t != module)
            elif isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for h in node.handlers:
                    visit(h.body)

    visit(ast.parse(MODULES[module].read_text()).body)
    return found


GRAPH = {m: _runtime_imports(m) for m in MODULES}


def _all_imports(module: str) -> set[str]:
    """Every project module ``module`` names in an import, wherever: module level, ``if TYPE_CHECKING:``,
    inside a function (the import picture a reader sees)."""
    tree = ast.parse(KNOWN[module].read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.update(t for t in _targets(module, node) if t != module)
    return found


PICTURE = {m: _all_imports(m) for m in KNOWN}

# The faces and what each may import besides the facade and the base modules: its own face's modules
# (``pages._common``, ``wap_core.cli.output``) and, for the integrations, the pipeline API they wrap.
FACADE_API = "wap_core.api"
BASE_TYPES = (
    "wap_core.exceptions",
    "wap_core.identifiers",
    "wap_core.states",
    "wap_core.values",
    "wap_core.config",
    "wap_core.actions",  # the actions' declarations (plain data): the CLI builds its commands from them
)
FACES: dict[str, tuple[str, ...]] = {
    "app": ("pages",),
    "pages": ("pages",),
    "wap_core.__main__": ("wap_core.cli",),
    "wap_core.cli": ("wap_core.cli",),
    "wap_core.pipeline": (),
    "wap_core.integrations": ("wap_core.integrations", "wap_core.pipeline"),
}
# Type-only arrows running up that item 2 of issue 26 (lake/ receives plain values, never the Lakehouse)
# removes: listed so that no new one appears; delete each line as its arrow goes.
AWAITING_ITEM_2 = {
    ("wap_core.lake.batch", "wap_core.lakehouse"),
    ("wap_core.lake.metaprofile", "wap_core.lakehouse"),
    ("wap_core.lake.refs", "wap_core.lakehouse"),
}


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> int:
    for i, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    raise AssertionError(f"{module} is in no layer: add it to LAYERS in {Path(__file__).name}")


def test_every_module_has_a_layer() -> None:
    for m in MODULES:
        if m != FACADE:
            layer_of(m)


def test_a_module_imports_only_its_layer_or_the_layers_below() -> None:
    wrong = [
        f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})"
        for m, targets in sorted(GRAPH.items())
        if m != FACADE
        for t in sorted(targets)
        if t != FACADE and layer_of(t) < layer_of(m)
    ]
    assert not wrong, "\n".join(wrong)


# Below the session, code receives plain values (a table, a catalog, settings, a journal): not even an
# annotation names the lakehouse or the session there.
PLAIN_VALUE_PACKAGES = (
    "wap_core.lake",
    "wap_core.store",
    "wap_core.checks",
    "wap_core.security",
    "wap_core.notify",
)


def _all_imports(module: str) -> set[str]:
    """Every wap_core module ``module`` imports anywhere, ``if TYPE_CHECKING:`` blocks included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.update(_targets(module, node))
    return found


def test_below_the_session_no_module_receives_the_lakehouse_or_the_session() -> None:
    bad = sorted(
        f"{m} imports {t}"
        for m in MODULES
        if m.startswith(PLAIN_VALUE_PACKAGES)
        for t in _all_imports(m)
        if t in ("wap_core.lakehouse", "wap_core.session")
    )
    assert not bad, "\n".join(bad)


def test_no_module_imports_the_package_root() -> None:
    """``from wap_core import Lakehouse`` inside the core would make every module depend on the facade."""
    wrong = [m for m, targets in GRAPH.items() if m != FACADE and FACADE in targets]
    assert not wrong, wrong


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (its strongly connected parts of more than one module; Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                circles.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return circles


def test_no_import_circle() -> None:
    circles = _circles(GRAPH)
    assert not circles, circles


def test_no_function_level_import_of_wap_core() -> None:
    """Neither in wap_core nor in the console's pages and ``app.py`` (an import inside a function hides
    what a module depends on)."""
    found = []
    for m, path in sorted({**MODULES, **CONSOLE}.items()):
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(fn):
                    if isinstance(node, ast.Import | ast.ImportFrom) and _targets(m, node):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} in {fn.name}()")
    assert not found, "\n".join(found)


def test_the_import_picture_has_no_circle() -> None:
    """Type-only and function-level imports included: a circle there is a circle a reader has to untangle
    (wap_core, the console and bench/)."""
    circles = _circles(PICTURE)
    assert not circles, circles


def test_the_import_picture_has_no_arrow_running_up() -> None:
    """The layers hold for type-only imports too (an annotation naming a higher layer couples the layers)."""
    wrong = sorted(
        (m, t)
        for m in MODULES
        if m != FACADE
        for t in PICTURE[m]
        if t in MODULES and t != FACADE and layer_of(t) < layer_of(m)
    )
    assert set(wrong) <= AWAITING_ITEM_2, [w for w in wrong if w not in AWAITING_ITEM_2]


def _face_of(module: str) -> str | None:
    return next((f for f in sorted(FACES, key=len, reverse=True) if _under(module, f)), None)


def test_every_face_is_known() -> None:
    assert {m for m in CONSOLE if _face_of(m) is None} == set()
    assert {_face_of(m) for m in MODULES} >= {"wap_core.cli", "wap_core.pipeline", "wap_core.integrations"}


def test_the_faces_import_only_the_facade_and_the_base_modules() -> None:
    """The console, the CLI, the pipeline API and the integrations call one API (:mod:`wap_core.api`)."""
    wrong = []
    for m in sorted(KNOWN):
        face = _face_of(m)
        if face is None:
            continue
        allowed = (FACADE_API, *BASE_TYPES, *FACES[face])
        wrong += [f"{m} imports {t}" for t in sorted(PICTURE[m]) if not any(_under(t, a) for a in allowed)]
    assert not wrong, "\n".join(wrong)


def test_the_architecture_test_sees_the_faces() -> None:
    """The checks above would pass vacuously if the console's files were not parsed."""
    assert "pages._common" in PICTURE and "app" in PICTURE
    assert FACADE_API in PICTURE["pages.review"] and FACADE_API in PICTURE["wap_core.cli.commands"]


def test_no_streamlit_in_the_core() -> None:
    found = []
    for m, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [m for n in names if n.split(".")[0] == "streamlit"]
    assert not found, found


@pytest.mark.parametrize("package", sorted(m for m, p in MODULES.items() if p.name == "__init__.py"))
def test_every_package_says_what_it_is_for(package: str) -> None:
    doc = ast.get_docstring(ast.parse(MODULES[package].read_text()))
    assert doc and len(doc.split()) >= 12, f"{package}: a one-paragraph docstring on what the package is for"


# One path for one table or many (issue 38): a branch is a batch of one. The twins that carried a batch's copy
# of an action are gone, and each action's one module declares one set of fault points for both.
GONE_TWINS = (
    "wap_core/actions/publish_batch.py",
    "wap_core/actions/discard_batch.py",
    "wap_core/actions/rollback_batch.py",
    "wap_core/actions/rebase_batch.py",
    "wap_core/workflow/batch_publish.py",
    "wap_core/workflow/batch_status.py",
    "wap_core/workflow/batch_moves.py",
)


@pytest.mark.parametrize("path", GONE_TWINS)
def test_no_batch_twin_beside_its_one_table_module(path: str) -> None:
    assert not (ROOT / path).exists(), f"{path} is back: one path per action (a branch is a batch of one)"


@pytest.mark.parametrize("action", ["publish", "discard", "rollback", "rebase"])
def test_one_table_and_a_batch_share_one_set_of_fault_points(action: str) -> None:
    from wap_core.actions import ACTIONS

    spec = ACTIONS[action]
    assert spec.faults and all(f"_{action}_batch_" in f for f in spec.faults), spec.faults
    assert f"{action}_batch" not in ACTIONS, f"{action}_batch is declared apart"
