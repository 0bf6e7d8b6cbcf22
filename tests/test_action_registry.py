"""Every declared action (wap_core.actions) is whole: its words are the journal's, its permission is in
access.RULES, its events in notify, its judge in reconcile, its CLI entry in the parser and the handlers;
and the suite holds a kill case and a refusal case for it.

Nothing here lists the actions: the kill and refusal cases are found in the tests' source (read with
``ast``), so a new action's declaration fails this module until its tests exist.
"""

from __future__ import annotations

import argparse
import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

from wap_core import actions, exceptions
from wap_core.actions.spec import ActionSpec
from wap_core.cli.commands import COMMANDS
from wap_core.cli.parser import COMMAND_ARGS, build_parser
from wap_core.faults import FAULT_POINTS, PAUSE_POINTS
from wap_core.notify.config import EVENT_TITLES, Event
from wap_core.security.access import RULES, Permission, Role
from wap_core.states import INTENT_ACTIONS, Action, Outcome
from wap_core.workflow.reconcile import JUDGES

TESTS = Path(__file__).resolve().parent
SPECS = actions.REGISTRY
IDS = [a.name for a in SPECS]

# the domain exceptions a refused action raises (exit 1), from wap_core.exceptions itself
REFUSALS = {
    name
    for name, cls in vars(exceptions).items()
    if inspect.isclass(cls) and issubclass(cls, exceptions.RefusedError)
}


def _sources() -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(TESTS.glob("test_*.py"))}


SOURCES = _sources()


def _strings(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _names(node: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return out


def _test_functions() -> Iterator[tuple[str, ast.FunctionDef]]:
    for path, tree in SOURCES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                yield f"{path.name}::{node.name}", node


def _flags(spec: ActionSpec) -> list[str]:
    return [p.removeprefix("--").replace("-", "_") for p in spec.cli.path if p.startswith("-")]


def _calls(spec: ActionSpec, node: ast.AST) -> bool:
    """``node`` calls the action's workflow function (with its flag set, e.g. ``publish(..., force=True)``)."""
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        f = call.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if name != spec.function:
            continue
        set_true = {
            k.arg for k in call.keywords if isinstance(k.value, ast.Constant) and k.value.value is True
        }
        if set(_flags(spec)) <= set_true:
            return True
    return False


def _cli_refusal_tables(spec: ActionSpec) -> list[str]:
    """Test modules refusing the action's command from a table (``test_access.py``'s role matrix): a literal
    argument list of the command (with its flag) in a module that expects access's "... may not ..." line."""
    found = []
    for path, tree in SOURCES.items():
        if not any("may not " in s for s in _strings(tree)):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.List | ast.Tuple):
                continue
            words = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            command = [p for p in spec.cli.path if not p.startswith("-")]
            if words[: len(command)] == command and {p for p in spec.cli.path if p.startswith("-")} <= set(
                words
            ):
                found.append(path.name)
                break
    return found


def _refuses(spec: ActionSpec, fn: ast.FunctionDef) -> bool:
    """The test expects the action refused: access's one-line refusal naming it ("... may not <verb>: ..."),
    or a refused action's exception (a ``RefusedError`` subclass) raised by a call of its workflow function."""
    verbs = {spec.permission.verb, spec.word.replace("_", " ")}
    if any(f"may not {verb}:" in s or s.endswith(f"may not {verb}") for s in _strings(fn) for verb in verbs):
        return True
    for with_ in (n for n in ast.walk(fn) if isinstance(n, ast.With)):
        for item in with_.items:
            expr = item.context_expr
            if (
                isinstance(expr, ast.Call)
                and "raises" in _names(expr.func)
                and expr.args
                and _names(expr.args[0]) & REFUSALS
                and any(_calls(spec, stmt) for stmt in with_.body)
            ):
                return True
    return False


def _kill_tested_points() -> set[str]:
    """Fault points named by the kill tests (the modules that expect the kill's exit code)."""
    out: set[str] = set()
    for tree in SOURCES.values():
        if "FAULT_EXIT_CODE" in _names(tree):
            out |= _strings(tree) & set(FAULT_POINTS)
    return out


KILLED = _kill_tested_points()


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_every_action_has_a_kill_case(spec: ActionSpec) -> None:
    if spec.moves_ref:
        assert spec.faults, f"{spec.name} moves a ref without fault points"
        assert set(spec.faults) & KILLED, f"no kill test names a fault point of {spec.name}: {spec.faults}"
        assert spec.word in JUDGES, f"reconcile cannot judge a pending {spec.word} intent"
    else:
        assert spec.no_ref.strip(), f"{spec.name} moves no ref: say why"
        assert spec.word not in actions.INTENT_WORDS, f"{spec.name}'s word {spec.word} is an intent's"
        assert not spec.faults, f"{spec.name} moves no ref but declares fault points"


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_every_action_has_a_refusal_case(spec: ActionSpec) -> None:
    cases = [name for name, fn in _test_functions() if _refuses(spec, fn)] + _cli_refusal_tables(spec)
    assert cases, f"no test refuses {spec.name} ({' '.join(spec.cli.path)} / {spec.function})"


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_every_action_has_a_cli_entry(spec: ActionSpec) -> None:
    assert spec.cli.path[0] in COMMANDS, f"no handler for {spec.cli.path[0]!r} in cli.commands.COMMANDS"
    parser: argparse.ArgumentParser = build_parser()
    for part in spec.cli.path:
        if part.startswith("-"):
            assert part in parser._option_string_actions, f"{' '.join(spec.cli.path)}: no {part} flag"
            continue
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        assert part in sub.choices, f"{' '.join(spec.cli.path)}: no {part!r} command"
        parser = sub.choices[part]


def test_the_words_permissions_and_events_are_read_from_the_declarations() -> None:
    members = set(Action.__members__.values())
    for spec in SPECS:
        assert Action(spec.word) in members, f"{spec.word} is no declared Action member"
        for outcome in spec.outcomes:
            assert Outcome(outcome) in set(Outcome.__members__.values()), outcome
    # token revocation writes declared words, not ones read back through _missing_
    assert Action("revoke_token") is Action.REVOKE_TOKEN and Outcome("revoked") is Outcome.REVOKED
    assert {a.value for a in INTENT_ACTIONS} == actions.INTENT_WORDS == set(JUDGES)
    assert FAULT_POINTS == actions.FAULT_POINTS and PAUSE_POINTS == actions.PAUSE_POINTS
    assert {p.value for p in Permission} == {p.word for p in actions.PERMISSIONS}
    for p in actions.PERMISSIONS:
        rule = RULES[Permission(p.word)]
        assert (rule.needed, rule.verb, rule.action) == (Role[p.role.upper()], p.verb, p.refused_as)
    assert {e.value for e in Event} == {e.word for e in actions.EVENTS}
    assert {Event(e.word): (e.title, e.emoji) for e in actions.EVENTS} == EVENT_TITLES
    # the parser's commands that are actions come from their declarations
    declared = {path[0]: c for path, c in actions.COMMANDS.items() if len(path) == 1}
    from_parser = {name: (help_text, args) for name, help_text, args in COMMAND_ARGS}
    for name, c in declared.items():
        assert from_parser[name] == (c.help, c.args)
