"""One ref-move path: every action that moves a ref announces, commits, journals and notifies through RefMove.

The behaviour of each action (its journal rows, exit codes, notifications, fault points) is pinned
by test_durability, test_workflow, test_core_lifecycle, test_gc and test_races; this test pins the
shape: the intent/outcome calls and the intent/commit fault points live in one module.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "wap_core"

# Who may write intent rows: the ref-move path, and recovery (it resolves other processes' intents).
ANNOUNCE = {"wap_core/workflow/refmove.py"}
RESOLVE = {"wap_core/workflow/refmove.py", "wap_core/workflow/reconcile.py"}
MOVE_POINT = re.compile(r"""fault_point\(\s*["']after_\w+_(intent|commit)["']""")


def _sources() -> dict[str, str]:
    return {
        str(p.relative_to(ROOT)): p.read_text()
        for p in CORE.rglob("*.py")
        if "migrations" not in p.parts and p.name != "journal.py"
    }


def test_intents_are_announced_and_resolved_only_on_the_ref_move_path() -> None:
    src = _sources()
    announce = {f for f, text in src.items() if "begin_intent(" in text}
    resolve = {f for f, text in src.items() if "resolve_intent(" in text}
    assert announce <= ANNOUNCE, f"intents announced outside RefMove: {sorted(announce - ANNOUNCE)}"
    assert resolve <= RESOLVE, f"intents resolved outside RefMove/reconcile: {sorted(resolve - RESOLVE)}"
    for module in ("ingest.py", "publish.py", "rebase.py", "discard.py", "rollback.py", "gc.py"):
        text = src[f"wap_core/workflow/{module}"]
        assert any(m in text for m in ("RefMove(", "BatchMove(", "_move(")), (
            f"{module} moves refs off the path"
        )


def test_intent_and_commit_fault_points_fire_in_one_place() -> None:
    src = _sources()
    hits = {f for f, text in src.items() if MOVE_POINT.search(text)}
    assert hits <= {"wap_core/workflow/ingest.py"}, (
        f"intent/commit fault points outside RefMove: {sorted(hits)}"
    )
