"""Every action, declared once: one module per action, one line per action in :data:`REGISTRY`.

A module here declares an action as plain data (:class:`~wap_core.actions.spec.ActionSpec`): its
journal word and outcomes, its permission, whether it moves a ref, its fault and pause points, its
notification events and its CLI command. This package is in the base layer, so the modules that need
those words read them from here: ``states`` (``Action``, ``INTENT_ACTIONS``), ``faults`` (the points),
``security.access`` (``RULES``), ``notify`` (``EVENT_TITLES``) and ``cli.parser`` (``COMMAND_ARGS``).
The callables live in their own layer and are found by the declared names: reconcile's judge by the
journal word (``workflow.reconcile.JUDGES``), the CLI handler by the command (``cli.commands.COMMANDS``);
``tests/test_action_registry.py`` checks each declaration has them, a kill case, a refusal case and a
CLI entry. Adding an action: a module here and its line below (then its workflow function, handler and,
if it moves a ref, its judge).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from wap_core.actions import (
    approve,
    audit,
    comment,
    common,
    create_token,
    discard,
    force,
    gc,
    ingest,
    open_branch,
    publish,
    quarantine,
    rebase,
    reopen,
    request_changes,
    revoke_token,
    rollback,
)
from wap_core.actions.spec import ActionSpec, CliCommand, EventSpec, PermissionSpec

# THE registry: one line per action.
REGISTRY: tuple[ActionSpec, ...] = (
    ingest.ACTION,
    audit.ACTION,
    publish.ACTION,
    force.ACTION,
    rebase.ACTION,
    quarantine.ACTION,
    discard.ACTION,
    rollback.ACTION,
    reopen.ACTION,
    open_branch.ACTION,
    gc.ACTION,
    approve.ACTION,
    request_changes.ACTION,
    comment.ACTION,
    create_token.ACTION,
    revoke_token.ACTION,
)

_T = TypeVar("_T")


def _unique(items: Iterable[_T]) -> tuple[_T, ...]:
    return tuple(dict.fromkeys(items))


def _check() -> None:
    names = [a.name for a in REGISTRY]
    if len(names) != len(set(names)):
        raise ValueError(f"an action is declared twice: {sorted(n for n in names if names.count(n) > 1)}")
    for kind, specs in (("permission", PERMISSIONS), ("event", EVENTS)):
        words = [s.word for s in specs]
        if len(words) != len(set(words)):
            raise ValueError(
                f"one {kind} word declared two ways: {sorted(w for w in words if words.count(w) > 1)}"
            )


ACTIONS: dict[str, ActionSpec] = {a.name: a for a in REGISTRY}
# the journal words announced as an intent before their Iceberg commit (reconcile judges them)
INTENT_WORDS: frozenset[str] = frozenset(a.word for a in REGISTRY if a.moves_ref)
# journal word -> how a landed move closes a batch table's membership (publish: published, discard: discarded)
CLOSES_MEMBERSHIP: dict[str, str] = {a.word: a.closes_membership for a in REGISTRY if a.closes_membership}
FAULT_POINTS: tuple[str, ...] = _unique(p for a in REGISTRY for p in a.faults)
PAUSE_POINTS: tuple[str, ...] = _unique(p for a in REGISTRY for p in a.pauses)
PERMISSIONS: tuple[PermissionSpec, ...] = _unique([*common.PERMISSIONS, *(a.permission for a in REGISTRY)])
EVENTS: tuple[EventSpec, ...] = _unique([*(e for a in REGISTRY for e in a.events), *common.EVENTS])
# CLI commands (and ``token`` subcommands) declared by actions, by path; flags of another command excluded
COMMANDS: dict[tuple[str, ...], CliCommand] = {
    a.cli.path: a.cli for a in REGISTRY if not a.cli.path[-1].startswith("-")
}
_check()

__all__ = [
    "ACTIONS",
    "CLOSES_MEMBERSHIP",
    "COMMANDS",
    "EVENTS",
    "FAULT_POINTS",
    "INTENT_WORDS",
    "PAUSE_POINTS",
    "PERMISSIONS",
    "REGISTRY",
    "ActionSpec",
    "CliCommand",
    "EventSpec",
    "PermissionSpec",
]
