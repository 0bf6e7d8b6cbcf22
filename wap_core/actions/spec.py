"""What an action declares, as plain data (base layer: the journal, access, faults and notify read it).

An :class:`ActionSpec` is one action's whole declaration: the journal words it writes, the permission it
needs, whether it moves a ref (then its fault and pause points, and reconcile judges its pending intent by
its journal word), the notifications it sends and its CLI command with its arguments. Callables (the
reconcile judge, the CLI handler) live in their own layer and are found by the declared names; the
registry test checks that each one exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

# An argparse argument: its flags and keyword arguments (``parser.add_argument(*flags, **kw)``).
ArgOptions: TypeAlias = dict[str, Any]  # argparse add_argument keyword options
Arg = tuple[tuple[str, ...], ArgOptions]


def arg(*flags: str, **kw: Any) -> Arg:
    """One CLI argument of a declaration, as ``argparse`` takes it."""
    return flags, kw


TABLE, BRANCH, JSON = arg("table"), arg("branch"), arg("--json", action="store_true")
# a command that takes TABLE BRANCH or ``--batch NAME`` (its handler refuses one without the other)
OPTIONAL_TABLE, OPTIONAL_BRANCH = arg("table", nargs="?"), arg("branch", nargs="?")


@dataclass(frozen=True)
class PermissionSpec:
    """A permission: its word, the lowest role holding it, its verb and the journal's action of a refusal."""

    word: str  # access.Permission's value
    role: str  # the lowest role holding it: viewer, steward, approver or admin
    verb: str  # as in "... may not <verb>: ..."
    refused_as: str  # the journal's action of a refusal (unless the caller names the action)


@dataclass(frozen=True)
class EventSpec:
    """A notification event: its word (what a webhook subscribes to), its title and its Slack emoji."""

    word: str
    title: str
    emoji: str


@dataclass(frozen=True)
class CliCommand:
    """Where the CLI runs an action: the command path, its help and its arguments.

    ``path`` is ``("publish",)`` for a command, ``("token", "revoke")`` for a subcommand and
    ``("publish", "--force")`` for a flag of another action's command (then ``help`` and ``args`` are
    that command's). The handler is ``cli.commands.COMMANDS[path[0]]``.
    """

    path: tuple[str, ...]
    help: str = ""
    args: tuple[Arg, ...] = ()


@dataclass(frozen=True)
class ActionSpec:
    """One action, declared once (``wap_core/actions/<name>.py``; listed in ``actions.REGISTRY``)."""

    name: str  # unique in the registry (force shares publish's journal word, not its name)
    word: str  # the journal's action (states.Action)
    outcomes: tuple[str, ...]  # the journal outcomes it writes when it acts (states.Outcome)
    permission: PermissionSpec
    cli: CliCommand
    moves_ref: bool = False  # announced as an intent (RefMove); reconcile judges it by ``word``
    no_ref: str = ""  # why it moves no ref (required when ``moves_ref`` is False): its kill case
    faults: tuple[str, ...] = ()  # fault points (WAP_FAULT), in the order the action reaches them
    pauses: tuple[str, ...] = ()  # pause points (WAP_PAUSE)
    events: tuple[EventSpec, ...] = ()  # the notifications it sends
    function: str = ""  # the workflow function that runs it (the registry test finds its refusal case)
    # a landed move of a batch's table closes the table's membership as this (reconcile closes it as the
    # action would have): "published", "discarded"; "" leaves memberships alone
    closes_membership: str = ""

    def __post_init__(self) -> None:
        if self.moves_ref == bool(self.no_ref):
            raise ValueError(
                f"action {self.name!r}: a ref-moving action has fault points, any other a no_ref reason"
            )
