"""discard: drop an audit branch, or every table's branch of a batch (mains untouched): one path, a branch
being a batch of one (:mod:`wap_core.workflow.discard`)."""

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
    # intents (one per table, one transaction) -> every table's new metadata file written -> the pointer swap
    # (inside the database transaction, then committed) -> the outcome rows (one transaction)
    faults=(
        "after_discard_batch_intents",
        "after_discard_batch_write",
        "in_discard_batch_transaction",
        "after_discard_batch_commit",
        "before_discard_batch_outcome",
    ),
    # the race tests hold the loser before its intents (after its read), or a batch's discard after them
    pauses=("before_discard_batch_intents", "after_discard_batch_intents"),
    events=(DISCARDED,),
    function="discard",
    closes_membership="discarded",
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
