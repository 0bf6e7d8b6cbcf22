"""force: publish over a failed or missing audit, with a reason (admin; journaled as a publish, ``forced``)."""

from __future__ import annotations

from wap_core.actions import publish
from wap_core.actions.spec import ActionSpec, CliCommand, PermissionSpec

FORCE_PUBLISH = PermissionSpec("force_publish", "admin", "force publish", "publish")

ACTION = ActionSpec(
    name="force",
    word="publish",  # a forced publish is a publish: the same intent, judge and fault points
    outcomes=("forced",),
    permission=FORCE_PUBLISH,
    moves_ref=True,
    faults=publish.FAULTS,
    events=(publish.PUBLISHED,),
    function="publish",
    cli=CliCommand(("publish", "--force")),
)
