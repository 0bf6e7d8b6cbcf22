"""discard: drop an audit branch (main untouched)."""

from __future__ import annotations

from wap_core.actions.spec import JSON, ActionSpec, CliCommand, EventSpec, PermissionSpec, arg

DISCARD = PermissionSpec("discard", "steward", "discard", "discard")
DISCARDED = EventSpec("discarded", "Discarded", ":wastebasket:")

ACTION = ActionSpec(
    name="discard",
    word="discard",
    outcomes=("discarded",),
    permission=DISCARD,
    moves_ref=True,
    faults=("after_discard_intent", "after_discard_commit"),  # intent -> branch removed -> outcome
    pauses=("before_discard_intent",),  # the race tests hold the loser here
    events=(DISCARDED,),
    function="discard",
    cli=CliCommand(
        ("discard",),
        "drop an audit branch (main untouched)",
        (
            arg("table", nargs="?"),
            arg("branch", nargs="?"),
            arg("--batch", help="discard every table's branch of this batch (instead of TABLE BRANCH)"),
            arg("--reason"),
            JSON,
        ),
    ),
)
