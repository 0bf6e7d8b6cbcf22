"""audit: (re-)run a branch's checks and store the result."""

from __future__ import annotations

from wap_core.actions.spec import (
    JSON,
    OPTIONAL_BRANCH,
    OPTIONAL_TABLE,
    ActionSpec,
    CliCommand,
    EventSpec,
    PermissionSpec,
    arg,
)

AUDIT = PermissionSpec("audit", "steward", "audit", "audit")  # the audit inside an ingest is the ingest's
AUDIT_FAILED = EventSpec("audit_failed", "Audit failed", ":x:")
AWAITING_APPROVAL = EventSpec("awaiting_approval", "Awaiting approval", ":hourglass_flowing_sand:")

ACTION = ActionSpec(
    name="audit",
    word="audit",
    outcomes=("passed", "warned", "failed"),
    permission=AUDIT,
    no_ref="an audit stores the checks' results of a branch's head; it moves no ref",
    events=(AUDIT_FAILED, AWAITING_APPROVAL),
    function="audit_branch",
    cli=CliCommand(
        ("audit",),
        "(re-)audit a branch",
        (
            OPTIONAL_TABLE,
            OPTIONAL_BRANCH,
            arg(
                "--batch",
                help="audit every table of the open batch of this name (instead of TABLE BRANCH): only the stale"
                " audits run; exit 1 when any table's latest audit failed",
            ),
            JSON,
        ),
    ),
)
