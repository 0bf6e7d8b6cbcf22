"""The Review's role-gated actions, one way for every Review: the one-branch Review (``pages/review.py``), the
batch's (``pages/_batch_review.py``) and the review panel (``pages/_workflow.py``).

Which actions who acts may take is the core's word, read without journaling (:func:`pages._common.may`, i.e.
``api.may``; approving: ``api.approve_decision``): a button its decision refuses is disabled with the core's
reason as its help, and one lock line per distinct reason follows the row. Nothing is decided here: the core
authorizes every call again (``wap_core.security.access.authorize``) and refuses it if the role may not.
A dialog's confirmed write runs through :func:`confirmed`: one success message, or the error in the dialog.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias, TypeVar

import streamlit as st

from pages import _common as ui
from wap_core.api import Context, Decision, Permission
from wap_core.exceptions import WapError

if TYPE_CHECKING:
    from streamlit.delta_generator import DeltaGenerator

T = TypeVar("T")

# The Review's actions: Re-run audit, Publish, Force publish, Discard, Rebase (of a branch or of a batch).
REVIEW_ACTIONS = (
    Permission.AUDIT,
    Permission.PUBLISH,
    Permission.FORCE_PUBLISH,
    Permission.DISCARD,
    Permission.REBASE,
)


# The core's word on an action: a Decision (``api.may``), or ``(allowed, why)`` (``api.approve_decision``).
Word: TypeAlias = Decision | tuple[bool, str]


def _said(word: Word) -> tuple[bool, str]:
    return (word.allowed, word.message) if isinstance(word, Decision) else word


def button(
    where: DeltaGenerator,
    label: str,
    word: Word,
    *,
    icon: str,
    help: str,
    ready: bool = True,
    primary: bool = False,
    key: str | None = None,
) -> bool:
    """An action button as wide as its column, in ``where``: enabled when the core's ``word`` allows it (and it
    is ``ready``, e.g. the publish check passed); its help ``help``, or the core's reason (escaped) when not
    allowed. Whether it was clicked."""
    allowed, why = _said(word)
    return where.button(
        label,
        icon=icon,
        type="primary" if primary else "secondary",
        width="stretch",
        disabled=not (ready and allowed),
        help=help if allowed else ui.md(why),
        key=key,
    )


def locks(words: Iterable[Word]) -> None:
    """A lock line under a row of buttons for each distinct reason of the core's refusals among ``words``."""
    for reason in dict.fromkeys(why for allowed, why in map(_said, words) if not allowed):
        st.caption(f":material/lock: {ui.md(reason)}")


@dataclass(frozen=True)
class Gate:
    """The core's decision on each of the Review's actions for who acts (:func:`gate`)."""

    decisions: Mapping[Permission, Decision]

    def __getitem__(self, permission: Permission) -> Decision:
        return self.decisions[permission]

    def locks(self, *, rebase: bool) -> None:
        """The lock lines under the row Re-run audit, Publish, Discard (and Rebase, when it is shown)."""
        shown = [Permission.AUDIT, Permission.PUBLISH, Permission.DISCARD] + (
            [Permission.REBASE] if rebase else []
        )
        locks(self[p] for p in shown)

    def force_publish(self, *, expander: str, caption: str, label: str, help: str) -> bool:
        """Force publish (the core's ``force_publish`` decision: admins) in an expander titled ``expander``:
        ``caption``, the lock line when the role may not, the button. Whether it was clicked."""
        with st.expander(expander):
            st.caption(caption)
            d = self[Permission.FORCE_PUBLISH]
            locks([d])
            return st.button(
                label,
                icon=":material/gpp_maybe:",
                disabled=not d.allowed,
                help=help if d.allowed else ui.md(d.message),
            )


def gate(ctx: Context) -> Gate:
    """The core's decisions on the Review's actions (:data:`REVIEW_ACTIONS`) for who acts."""
    return Gate({p: ui.may(ctx, p) for p in REVIEW_ACTIONS})


def confirmed(
    action: Callable[[], T],
    message: Callable[[T], str],
    *,
    close: Callable[[], None] | None = None,
    closed: tuple[str, object] | None = None,
) -> None:
    """Run a confirmed write (a dialog's submit, or a click that needs no dialog). On success: close the dialog
    (``close``), clear the caches, remember what the write closed (``closed``: a session-state key and its
    value, so that the page shows no "not open" line under the message), queue ``message(result)`` as the one
    success message and rerun. On a WapError: show it (in the dialog) and return."""
    try:
        res = action()
    except WapError as exc:
        ui.show_error(exc)
        return
    if close is not None:
        close()
    ui.writes_done()
    if closed is not None:
        st.session_state[closed[0]] = closed[1]
    ui.flash("success", message(res))
    st.rerun()
