"""quarantine: move the rows of a failed batch that fail its row-level checks to the table's quarantine table."""

from __future__ import annotations

from wap_core.actions.spec import BRANCH, JSON, TABLE, ActionSpec, CliCommand, EventSpec, PermissionSpec, arg

QUARANTINE = PermissionSpec("quarantine", "steward", "quarantine", "quarantine")
# an ingest's checks with ``on_fail: quarantine`` moved its failing rows (wap_core.workflow.quarantine_policy)
QUARANTINED = EventSpec("quarantined", "Rows quarantined", ":package:")

ACTION = ActionSpec(
    name="quarantine",
    word="quarantine",
    outcomes=("quarantined",),
    permission=QUARANTINE,
    moves_ref=True,
    # intent -> failing rows kept on the quarantine table's branch -> the kept rows on a temp branch at the
    # fork -> swap (the branch's batch is now the kept rows) -> outcome
    faults=(
        "after_quarantine_intent",
        "after_quarantine_keep",
        "after_quarantine_write",
        "after_quarantine_commit",
    ),
    # the race test holds a quarantine's intent while a second one of the same branch is refused
    pauses=("after_quarantine_intent",),
    events=(QUARANTINED,),
    function="quarantine",
    cli=CliCommand(
        ("quarantine",),
        "move a failed batch's failing rows to the table's quarantine table",
        (
            TABLE,
            BRANCH,
            arg(
                "--check",
                action="append",
                default=[],
                metavar="NAME",
                help="a failing row-level check to apply (repeatable; default: every failing one)",
            ),
            arg("--reason", required=True, help="why the rows are quarantined"),
            JSON,
        ),
    ),
)
