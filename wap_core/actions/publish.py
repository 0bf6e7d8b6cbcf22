"""publish: fast-forward main to an audited branch (one metadata commit; the branch is removed)."""

from __future__ import annotations

from wap_core.actions.spec import JSON, ActionSpec, CliCommand, EventSpec, PermissionSpec, arg

PUBLISH = PermissionSpec("publish", "approver", "publish", "publish")  # a branch whose audit passed
PUBLISHED = EventSpec("published", "Published", ":white_check_mark:")
# intent -> one metadata commit (main moves, branch removed) -> outcome
FAULTS = ("after_publish_intent", "after_publish_commit")

ACTION = ActionSpec(
    name="publish",
    word="publish",
    outcomes=("published",),
    permission=PUBLISH,
    moves_ref=True,
    faults=FAULTS,
    # before_: the race tests hold the loser between its precondition and its intent (tests/test_races.py);
    # after_intent: the object-store tests stop the store before the commit (tests/test_s3_store.py)
    pauses=("before_publish_intent", "after_publish_intent"),
    events=(PUBLISHED,),
    function="publish",
    cli=CliCommand(
        ("publish",),
        "fast-forward main to an audited branch",
        (
            arg("table", nargs="?"),
            arg("branch", nargs="?"),
            arg("--batch", help="publish every table of this batch, all or none (instead of TABLE BRANCH)"),
            arg("--force", action="store_true"),
            arg("--reason"),
            JSON,
        ),
    ),
)
