"""gc: retention (admin): discard expired branches, remove leftovers, expire old snapshots."""

from __future__ import annotations

from wap_core.actions import common
from wap_core.actions.spec import JSON, ActionSpec, CliCommand, EventSpec, arg

EXPIRED = EventSpec("expired", "Expired", ":alarm_clock:")

ACTION = ActionSpec(
    name="gc",
    word="gc",
    outcomes=("expired", "removed"),
    permission=common.ADMIN,
    no_ref=(
        "gc never announces an intent of its own: each branch it drops is a discard's RefMove (journaled, "
        "judged and killed as a discard), and expiring snapshots moves no ref"
    ),
    events=(EXPIRED,),
    function="collect_garbage",
    cli=CliCommand(
        ("gc",),
        "retention (admin): discard expired branches, remove leftovers, expire old snapshots",
        (
            arg(
                "--older-than",
                metavar="DURATION",
                help="snapshot retention for this run, e.g. 14d, 36h, 0s "
                "(default: table property history.expire.max-snapshot-age-ms, else WAP_SNAPSHOT_RETENTION)",
            ),
            arg("--dry-run", action="store_true", help="report what would happen and change nothing"),
            JSON,
        ),
    ),
)
