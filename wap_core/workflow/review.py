"""The review workflow: approvals bound to a branch head, per-table policies, and the comment thread.

* An approval (or a request for changes) is of the branch's **current head snapshot**. A later
  commit or a rebase moves the head, and every earlier review is *dismissed* (listed, never counted).
* In a batch that spans tables (:mod:`wap_core.workflow.batch`) a review binds to the **set of heads**
  of every table of the batch (``wap_reviews.heads``, migration 0008): a new commit on *any* table of
  the batch dismisses it, on every table. :func:`approve_batch` / :func:`request_changes_batch` record
  one review on every table of the batch in one transaction; ``author_cannot_approve`` counts every
  author of every table of the batch. A plain branch (a one-table batch) binds to its own head, as before.
* Each reviewer's latest review on the head counts: an approval replaces the same reviewer's
  earlier request for changes; an open request for changes blocks publish whatever the approvals.
* Policies per table come from the access file's ``policies:`` section, with ``"*"`` as default::

      policies:
        "*": {approvals: 0}
        demo.flights: {approvals: 1, author_cannot_approve: true, force_needs_second_admin: true}

* The authors of a branch are everyone who wrote its batch (from the journal): whoever ingested
  into it, rebased (replayed) it or reopened it, since the branch name was last published or
  discarded; a reopened batch keeps the authors it had when it was published. ``author_cannot_approve``
  applies to every one of them, so a rebase by someone else never launders an author's approval.

:func:`review_state` answers everything the publish guard (:func:`wap_core.workflow.publish.publish_readiness`),
``branches --json`` and the console need. Reviews and comments live in the catalog's database
(``wap_reviews``, ``wap_comments``; migration 0005) and outlive the branch.
"""

from __future__ import annotations

import fnmatch
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar

import yaml
from sqlalchemy import Column, Connection, Index, String, Text, and_, insert, or_, select
from sqlalchemy import Table as SqlTable

from wap_core.config import mask_secrets
from wap_core.exceptions import AccessFileError, RefusedError, ValidationError
from wap_core.identifiers import MAIN, TableId, validate_branch
from wap_core.lake import catalog as cat
from wap_core.notify import Event, emit
from wap_core.security.access import AccessPolicy, Permission, Role, access_policy, decide
from wap_core.session import Session, session_of
from wap_core.states import Action, Outcome
from wap_core.store import batches as batch_store
from wap_core.store.journal import journal_table, utcnow
from wap_core.store.schema import event_columns, from_row, metadata, snapshot_column
from wap_core.values import JSON, OMIT, JsonObject, JsonOrder
from wap_core.workflow.batch import Batch, batch_of, find_batch, load_batch

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)

MAX_TEXT = 10_000  # characters of a comment
MAX_CHECK = 512

# Migration 0005: each reviewer's verdict on a branch head, and the thread.
reviews_table = SqlTable(
    "wap_reviews",
    metadata,
    *event_columns(),
    snapshot_column("snapshot_id", nullable=False),  # the branch head the verdict is about
    Column("verdict", String(32), nullable=False),  # approved | changes_requested
    Column("role", String(16), nullable=True),  # the reviewer's role when reviewing
    Column("comment", Text, nullable=True),
    # migration 0008: a batch's heads the verdict binds to (JSON {table: snapshot}); NULL: its own head
    Column("heads", Text, nullable=True),
    Index("ix_wap_reviews_table_branch", "table_name", "branch"),
)

comments_table = SqlTable(
    "wap_comments",
    metadata,
    *event_columns(),
    snapshot_column("snapshot_id"),  # the branch head when written
    Column("check_name", String(512), nullable=True),  # the check the comment is about
    Column("kind", String(32), nullable=False),  # comment | approved | changes_requested
    Column("text", Text, nullable=False),
    Index("ix_wap_comments_table_branch", "table_name", "branch"),
)


class ReviewState(str, Enum):
    """The ``review`` value of ``branches --json`` and the Branches page."""

    NONE = "none"  # the policy needs no approval and nobody reviewed the head
    AWAITING = "awaiting"  # the policy needs more approvals on the head
    APPROVED = "approved"  # the policy is satisfied on the head
    CHANGES_REQUESTED = "changes_requested"  # a reviewer's latest review on the head asks for changes


class Verdict(str, Enum):
    """A reviewer's verdict on a branch head."""

    APPROVED = "approved"
    CHANGES_REQUESTED = "changes_requested"


class CommentKind(str, Enum):
    """What a row of a branch's thread is: a comment, or the note of a verdict."""

    COMMENT = "comment"
    APPROVED = Verdict.APPROVED.value
    CHANGES_REQUESTED = Verdict.CHANGES_REQUESTED.value


# --------------------------------------------------------------------------- policies

POLICY_KEYS = ("approvals", "author_cannot_approve", "force_needs_second_admin")


@dataclass(frozen=True)
class ReviewPolicy:
    """The review rules of a table: approvals needed, author approval, second admin for a force."""

    approvals: int = 0
    author_cannot_approve: bool = False
    force_needs_second_admin: bool = False
    source: str = "default"  # the policies key it came from ("*", a table, a pattern) or "default"


_parsed: dict[int, tuple[AccessPolicy, dict[str, ReviewPolicy]]] = {}


def parse_policies(policy: AccessPolicy) -> dict[str, ReviewPolicy]:
    """The ``policies:`` section as {table or pattern: ReviewPolicy}; errors name the file and line."""
    hit = _parsed.get(id(policy))
    if hit is not None and hit[0] is policy:
        return hit[1]
    out: dict[str, ReviewPolicy] = {}
    node = policy.policies_node
    if isinstance(node, yaml.MappingNode):
        for key_node, val_node in node.value:
            line = int(key_node.start_mark.line) + 1
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str) or not key:
                raise AccessFileError(
                    policy.path, line, 'a policy key must be a table name (namespace.table) or "*"'
                )
            if key != "*" and "*" not in key:
                try:
                    TableId.parse(key)
                except ValidationError as exc:
                    raise AccessFileError(policy.path, line, f"policy key {key!r}: {exc}") from exc
            if key in out:
                raise AccessFileError(policy.path, line, f"policy {key!r} is given twice")
            if not isinstance(val_node, yaml.MappingNode):
                raise AccessFileError(
                    policy.path,
                    int(val_node.start_mark.line) + 1,
                    f"policy {key!r} must be a mapping, e.g. {{approvals: 1, author_cannot_approve: true}}",
                )
            values: JsonObject = {}
            for k_node, v_node in val_node.value:
                k_line = int(k_node.start_mark.line) + 1
                k = k_node.value if isinstance(k_node, yaml.ScalarNode) else None
                if k not in POLICY_KEYS:
                    raise AccessFileError(
                        policy.path, k_line, f"unknown policy key {k!r}: use {', '.join(POLICY_KEYS)}"
                    )
                v = yaml.safe_load(yaml.serialize(v_node))
                if k == "approvals":
                    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 10:
                        raise AccessFileError(
                            policy.path, k_line, f"'approvals' must be a whole number from 0 to 10, got {v!r}"
                        )
                elif not isinstance(v, bool):
                    raise AccessFileError(policy.path, k_line, f"{k!r} must be true or false, got {v!r}")
                values[str(k)] = v
            out[key] = ReviewPolicy(source=key, **values)
    if len(_parsed) > 64:
        _parsed.clear()
    _parsed[id(policy)] = (policy, out)
    return out


def policy_for(src: Lakehouse | AccessPolicy, table: TableId | str) -> ReviewPolicy:
    """The table's review policy: its own entry, else the most specific matching pattern, else ``"*"``."""
    policy = src if isinstance(src, AccessPolicy) else access_policy(src.settings)
    pols = parse_policies(policy)
    name = str(table)
    if name in pols:
        return pols[name]
    patterns = [k for k in pols if k != "*" and "*" in k and fnmatch.fnmatchcase(name, k)]
    if patterns:
        return pols[max(patterns, key=len)]
    return pols.get("*", ReviewPolicy())


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Review:
    """One reviewer's verdict on a branch head."""

    id: int
    at: datetime
    user: str
    table: str
    branch: str
    snapshot_id: int
    verdict: Verdict
    role: str | None
    comment: str | None
    heads: Mapping[str, int] | None = None  # a batch's heads it binds to (None: the branch's own head)

    @property
    def bound_to(self) -> dict[str, int]:
        """The heads this review is about: its batch's set, or ``{its table: its snapshot}``."""
        return dict(self.heads) if self.heads is not None else {self.table: self.snapshot_id}


def _heads_view(heads: Mapping[str, int] | None) -> Any:
    return OMIT if heads is None else dict(heads)


@dataclass(frozen=True)
class Comment:
    """A comment (or a verdict's note) on a branch, optionally on one check."""

    id: int
    at: datetime
    user: str
    table: str
    branch: str
    snapshot_id: int | None
    check: str | None
    kind: CommentKind
    text: str


@dataclass(frozen=True)
class ReviewStatus:
    """Where a branch head stands against its table's policy (its JSON: the state as ``review``,
    ``approvals`` counted, who approved and who asks for changes by name)."""

    __json__: ClassVar[JsonOrder] = (
        "table",
        "branch",
        "head",
        "heads",
        "policy",
        "author",
        "authors",
        "state",
        "approvals",
        "required",
        "approved_by",
        "changes_requested_by",
        "dismissed",
        "message",
    )

    table: str
    branch: str
    head: int
    policy: ReviewPolicy
    author: str | None  # the latest writer (the last of ``authors``)
    state: ReviewState = field(metadata={JSON: "review"})
    approvals: tuple[Review, ...] = field(
        metadata={JSON: len}
    )  # counting approvals on the head (each reviewer's latest)
    changes_requested: tuple[Review, ...]  # open requests for changes on the head
    dismissed: tuple[
        Review, ...
    ]  # latest reviews of earlier heads (a later commit or a rebase dismissed them)
    ignored: tuple[Review, ...] = field(
        default=()
    )  # the authors' own approvals where the policy forbids them
    authors: tuple[str, ...] = field(default=())  # everyone who wrote the batch, first writer first
    # a batch that spans tables: every table's head, what reviews bind to (None: a plain branch; not in JSON)
    heads: Mapping[str, int] | None = field(default=None, metadata={JSON: _heads_view})

    @property
    def missing(self) -> int:
        """How many more approvals the policy needs."""
        return max(0, self.policy.approvals - len(self.approvals))

    @property
    def required(self) -> int:
        """The approvals the policy needs."""
        return self.policy.approvals

    @property
    def approved_by(self) -> list[str]:
        """Who approved the head (the counting approvals)."""
        return [r.user for r in self.approvals]

    @property
    def changes_requested_by(self) -> list[str]:
        """Who asks for changes on the head."""
        return [r.user for r in self.changes_requested]

    @property
    def satisfied(self) -> bool:
        """True when the policy's approvals are in and no changes are requested."""
        return not self.changes_requested and self.missing == 0

    @property
    def message(self) -> str:
        """Why the policy is not satisfied (empty when it is)."""
        parts = []
        if self.changes_requested:
            parts.append("changes requested by " + ", ".join(r.user for r in self.changes_requested))
        if self.missing:
            parts.append(
                f"{self.missing} approval{'s' if self.missing != 1 else ''} of {self.policy.approvals} required "
                f"{'is' if self.missing == 1 else 'are'} missing"
            )
        return "; ".join(parts)


def _review(r: Any) -> Review:
    raw = r.get("heads")
    heads = {str(k): int(v) for k, v in json.loads(str(raw)).items()} if raw else None
    return from_row(Review, r, snapshot_id=int(r["snapshot_id"]), verdict=Verdict(r["verdict"]), heads=heads)


def _comment(r: Any) -> Comment:
    return from_row(Comment, r, kind=CommentKind(r["kind"]))


def _branch_rows(lh: Lakehouse, rows: SqlTable, table: TableId | str, branch: str) -> Sequence[Any]:
    """The rows of ``rows`` (reviews or comments) about the branch, oldest first."""
    q = select(rows).where(and_(rows.c.table_name == str(table), rows.c.branch == branch)).order_by(rows.c.id)
    with lh.journal.engine.connect() as conn:
        return conn.execute(q).mappings().all()


def reviews(lh: Lakehouse, table: TableId | str, branch: str) -> list[Review]:
    """Every review of the branch (all heads), oldest first."""
    return [_review(r) for r in _branch_rows(lh, reviews_table, table, branch)]


def _all_reviews(lh: Lakehouse, table: str | None) -> dict[tuple[str, str], list[Review]]:
    q = select(reviews_table).order_by(reviews_table.c.id)
    if table is not None:
        q = q.where(reviews_table.c.table_name == table)
    out: dict[tuple[str, str], list[Review]] = {}
    with lh.journal.engine.connect() as conn:
        for r in conn.execute(q).mappings().all():
            rv = _review(r)
            out.setdefault((rv.table, rv.branch), []).append(rv)
    return out


# journal (action, outcome) pairs that write a branch's batch: their users are its authors
_AUTHOR_OUTCOMES = (
    (Action.INGEST, Outcome.WRITTEN),
    (Action.INGEST, Outcome.INCOMPLETE),
    (Action.REBASE, Outcome.REBASED),
    (Action.REOPEN, Outcome.REOPENED),
    (Action.OPEN, Outcome.OPENED),  # a job's branch opened for it: its identity wrote it
    (Action.OPEN, Outcome.TAKEN_OVER),  # a branch written by a job that never opened it, its author now named
    (Action.QUARANTINE, Outcome.QUARANTINED),  # the steward who repaired the batch wrote its new head
)
# pairs that end a branch: a later ingest under the same name is a new batch with new authors
_END_OUTCOMES = (
    (Action.PUBLISH, Outcome.PUBLISHED),
    (Action.PUBLISH, Outcome.FORCED),
    (Action.DISCARD, Outcome.DISCARDED),
    (Action.DISCARD, Outcome.EXPIRED),
    (Action.DISCARD, Outcome.REMOVED),
)


def _same(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return False
    return a.casefold() == b.casefold() if "@" in a else a == b


def is_author(user: str | None, authors: Sequence[str]) -> bool:
    """True when ``user`` is one of ``authors`` (e-mail addresses compare case-insensitively)."""
    return any(_same(user, a) for a in authors)


def _add(out: list[str], users: Sequence[str]) -> None:
    for u in users:
        if u and not is_author(u, out):
            out.append(u)


def _replay(
    lh: Lakehouse, table: str | None
) -> tuple[dict[tuple[str, str], list[str]], dict[int, list[str]]]:
    """Replay the journal's writes and ends of branches: ({(table, branch): authors of its open batch},
    {snapshot a publish moved main to: the authors its batch had then})."""
    c = journal_table.c
    pairs = (*_AUTHOR_OUTCOMES, *_END_OUTCOMES)
    q = (
        select(c.table_name, c.branch, c.user_name, c.action, c.snapshot_after, c.details)
        .where(or_(*[and_(c.action == a.value, c.outcome == o.value) for a, o in pairs]))
        .order_by(c.id)
    )
    if table is not None:
        q = q.where(c.table_name == table)
    with lh.journal.engine.connect() as conn:
        rows = conn.execute(q).all()
    open_: dict[tuple[str, str], list[str]] = {}
    published: dict[int, list[str]] = {}
    for t, b, u, word, after, details in rows:
        key, action = (str(t), str(b)), Action(word)
        if action in (Action.PUBLISH, Action.DISCARD):
            ended = open_.pop(key, [])
            if action is Action.PUBLISH and after is not None:
                published[int(str(after))] = ended
            continue
        out = open_.setdefault(key, [])
        if action is Action.REOPEN:  # a reopened batch keeps the authors recorded when it was reopened
            try:
                kept = json.loads(str(details or "{}")).get("authors") or []
            except (ValueError, AttributeError):  # not JSON or not an object: no authors kept
                kept = []
            _add(out, [x for x in kept if isinstance(x, str)])
        _add(out, [str(u)])
    return open_, published


def authors(lh: Lakehouse, table: str | None = None) -> dict[tuple[str, str], tuple[str, ...]]:
    """{(table, branch): its authors, first writer first}: everyone who ingested into, rebased or
    reopened each branch since its name was last published or discarded (from the journal)."""
    return {k: tuple(v) for k, v in _replay(lh, table)[0].items()}


def authors_of(lh: Lakehouse, table: TableId | str, branch: str) -> tuple[str, ...]:
    """Everyone who wrote the branch's batch (ingest, re-ingest, rebase, reopen), first writer first."""
    return authors(lh, str(table)).get((str(table), branch), ())


def author_of(lh: Lakehouse, table: TableId | str, branch: str) -> str | None:
    """The branch's latest writer (the last of :func:`authors_of`); None if unknown."""
    found = authors_of(lh, table, branch)
    return found[-1] if found else None


def batch_authors(lh: Lakehouse, table: TableId, tbl: Table, snapshot_id: int) -> tuple[str, ...]:
    """The authors of the rolled-back batch(es) that a reopen of ``snapshot_id`` brings back.

    For every snapshot from ``snapshot_id`` back to main's current line: the authors its branch had
    when a publish moved main to it (from the journal) and the user it was written by (``wap.user``).
    """
    main_ids = {s.snapshot_id for s in cat.ancestors(tbl, cat.ref_snapshot_id(tbl, MAIN))}
    published = _replay(lh, str(table))[1]
    out: list[str] = []
    for snap in cat.ancestors(tbl, snapshot_id):
        if snap.snapshot_id in main_ids:
            break
        _add(out, published.get(snap.snapshot_id, []))
        user = cat.summary_get(snap, "wap.user")
        if user:
            _add(out, [user])
    return tuple(out)


def evaluate(
    table: str,
    branch: str,
    head: int,
    policy: ReviewPolicy,
    authors: Sequence[str] | str | None,
    all_reviews: list[Review],
    *,
    heads: Mapping[str, int] | None = None,
    batch_authors: Sequence[str] | None = None,
) -> ReviewStatus:
    """Pure: the review status of ``head`` from the branch's reviews (oldest first) and its authors.

    ``heads``: when the branch is in a batch that spans tables, every table's head: a review counts only
    when it binds to exactly that set. ``batch_authors``: everyone who wrote any table of that batch (their
    approvals are ignored under ``author_cannot_approve``; default: ``authors``).
    """
    writers = (authors,) if isinstance(authors, str) else tuple(authors or ())
    excluded = tuple(batch_authors) if batch_authors is not None else writers
    current = dict(heads) if heads is not None else {table: head}
    latest: dict[str, Review] = {}
    for r in all_reviews:
        latest[r.user.casefold() if "@" in r.user else r.user] = r
    on_head = [r for r in latest.values() if r.bound_to == current]
    dismissed = tuple(r for r in latest.values() if r.bound_to != current)
    approvals = [r for r in on_head if r.verdict == Verdict.APPROVED]
    ignored = tuple(r for r in approvals if policy.author_cannot_approve and is_author(r.user, excluded))
    counting = tuple(r for r in approvals if r not in ignored)
    changes = tuple(r for r in on_head if r.verdict == Verdict.CHANGES_REQUESTED)
    if changes:
        state = ReviewState.CHANGES_REQUESTED
    elif len(counting) < policy.approvals:
        state = ReviewState.AWAITING
    elif counting:
        state = ReviewState.APPROVED
    else:
        state = ReviewState.NONE
    last_writer = writers[-1] if writers else None
    return ReviewStatus(
        table, branch, head, policy, last_writer, state, counting, changes, dismissed, ignored, writers, heads
    )


def _batch_authors(
    who: Mapping[tuple[str, str], Sequence[str]], tables: Sequence[str], branch: str
) -> tuple[str, ...]:
    """Every author of every one of ``tables``' ``branch`` (a batch's), first writers first."""
    out: list[str] = []
    for t in tables:
        _add(out, who.get((t, branch), ()))
    return tuple(out)


def review_state(
    lh: Lakehouse, table: TableId, branch: str, tbl: Table | None = None, *, batch: Batch | None = None
) -> ReviewStatus:
    """The review status of the branch's current head (no authorization: a read like ``branches``).

    A table of a batch that spans tables: reviews count only when bound to every table's current head,
    and every author of every table of the batch is an author under ``author_cannot_approve``. ``batch``:
    the open batch the caller already loaded (``branch``'s, with ``table`` in it), else it is looked up.
    """
    tbl = tbl if tbl is not None else lh.table(table)
    head = cat.require_branch(tbl, table, branch)
    if batch is None or batch.name != branch or table not in batch:
        batch = batch_of(lh, table, branch)
    if batch is None:
        return evaluate(
            str(table),
            branch,
            head,
            policy_for(lh, table),
            authors_of(lh, table, branch),
            reviews(lh, table, branch),
        )
    who = authors(lh)
    return evaluate(
        str(table),
        branch,
        head,
        policy_for(lh, table),
        who.get((str(table), branch), ()),
        reviews(lh, table, branch),
        heads=batch.heads,
        batch_authors=_batch_authors(who, list(batch.heads), branch),
    )


def review_states(
    lh: Lakehouse, table: str | None, heads: Mapping[tuple[str, str], int]
) -> dict[tuple[str, str], ReviewStatus]:
    """Review status of many branch heads in few queries (``branches``); a batch's tables as :func:`review_state`."""
    all_reviews = _all_reviews(lh, table)
    members: dict[str, set[str]] = {}
    for m in batch_store.open_members(lh.journal.engine):
        members.setdefault(m.batch, set()).add(m.table)
    in_batch = {(t, b) for t, b in heads if t in members.get(b, set())}
    who = authors(lh, None if in_batch else table)  # a batch's other tables' authors count too
    batches = {b: find_batch(lh, b) for b in {b for _, b in in_batch}}
    policy = access_policy(lh.settings)
    out: dict[tuple[str, str], ReviewStatus] = {}
    for (t, b), head in heads.items():
        batch = batches.get(b) if (t, b) in in_batch else None
        if batch is not None and t in batch:
            out[(t, b)] = evaluate(
                t,
                b,
                head,
                policy_for(policy, t),
                who.get((t, b)),
                all_reviews.get((t, b), []),
                heads=batch.heads,
                batch_authors=_batch_authors(who, list(batch.heads), b),
            )
        else:
            out[(t, b)] = evaluate(
                t, b, head, policy_for(policy, t), who.get((t, b)), all_reviews.get((t, b), [])
            )
    return out


def second_admin_approval(lh: Lakehouse, status: ReviewStatus, forcing_user: str) -> Review | None:
    """An approval on the head by an admin other than ``forcing_user`` (for ``force_needs_second_admin``)."""
    policy = access_policy(lh.settings)
    for r in status.approvals:
        if (
            not _same(r.user, forcing_user)
            and r.user != forcing_user
            and policy.role_of(r.user) == Role.ADMIN
        ):
            return r
    return None


# --------------------------------------------------------------------------- actions


def _clean_text(text: str | None, what: str, required: bool) -> str | None:
    if text is None or not text.strip():
        if required:
            raise ValidationError(f"{what} must not be empty")
        return None
    if len(text) > MAX_TEXT:
        raise ValidationError(f"{what} is too long ({len(text)} characters, at most {MAX_TEXT})")
    if any(not ch.isprintable() and ch not in "\n\t" for ch in text):
        raise ValidationError(f"{what} holds control characters")
    return mask_secrets(text.strip())  # a pasted token or password is never stored: it is masked here


def _insert_comment(
    conn: Connection,
    at: datetime,
    user: str,
    table: TableId,
    branch: str,
    head: int,
    kind: CommentKind,
    text: str,
    check: str | None = None,
) -> int:
    """One row of the branch's thread, in the caller's transaction; its id."""
    return _insert_branch_row(
        conn, comments_table, at, user, table, branch, head, check_name=check, kind=kind.value, text=text
    )


def _insert_branch_row(
    conn: Connection,
    into: SqlTable,
    at: datetime,
    user: str,
    table: TableId,
    branch: str,
    head: int,
    **rest: Any,
) -> int:
    """One row about ``branch`` at ``head`` (a review, a comment) in the caller's transaction; its id."""
    values = {"at": at, "user_name": user, "table_name": str(table), "branch": branch, "snapshot_id": head}
    pk = conn.execute(insert(into).values(**values, **rest)).inserted_primary_key
    assert pk is not None
    return int(pk[0])


def _record_review(
    lh: Lakehouse,
    user: str,
    tables: Sequence[TableId],
    branch: str,
    verdict: Verdict,
    comment: str | None,
    role: Role | None,
    batch_heads: Mapping[str, int] | None = None,
) -> list[Review]:
    """One review of each of ``tables``' ``branch`` in ONE transaction (journaled after). ``batch_heads``: the
    batch's heads every one binds to (None: each table's own head, a plain branch)."""
    now = utcnow()
    label = role.label if role is not None else None
    bound = json.dumps(dict(sorted(batch_heads.items()))) if batch_heads is not None else None
    done: list[Review] = []
    with lh.journal.engine.begin() as conn:
        for table in tables:
            head = (
                batch_heads[str(table)]
                if batch_heads is not None
                else cat.require_branch(lh.table(table), table, branch)
            )
            review_id = _insert_branch_row(
                conn,
                reviews_table,
                now,
                user,
                table,
                branch,
                head,
                verdict=verdict.value,
                role=label,
                comment=comment,
                heads=bound,
            )
            _insert_comment(conn, now, user, table, branch, head, CommentKind(verdict.value), comment or "")
            heads = dict(batch_heads) if batch_heads is not None else None
            done.append(
                Review(review_id, now, user, str(table), branch, head, verdict, label, comment, heads)
            )
    for rv in done:
        details: JsonObject = {"batch": branch, "heads": dict(rv.heads)} if rv.heads is not None else {}
        lh.journal.record(
            user=user,
            action=_VERDICT_ACTIONS[verdict],
            table=rv.table,
            branch=branch,
            snapshot_after=rv.snapshot_id,
            outcome=Outcome(verdict.value),
            reason=comment,
            details=details,
        )
    return done


_VERDICT_ACTIONS = {Verdict.APPROVED: Action.APPROVE, Verdict.CHANGES_REQUESTED: Action.REQUEST_CHANGES}


def _writers(lh: Lakehouse, table: TableId, branch: str, batch: Batch | None) -> tuple[str, ...]:
    """Who counts as an author of ``table``'s ``branch`` for ``author_cannot_approve``: its own authors, or,
    in a batch that spans tables, every author of every table of the batch."""
    if batch is None:
        return authors_of(lh, table, branch)
    return _batch_authors(authors(lh), list(batch.heads), branch)


def _refuse_self_approval(s: Session, table: TableId, branch: str, batch: Batch | None = None) -> None:
    """Refuse (journaled, through the session's one refusal path; not notified, as before) when the policy
    forbids the branch's author to approve it and the acting user is one (of any table of its batch)."""
    lh, user = s.lakehouse, s.user
    policy = policy_for(lh, table)
    if policy.author_cannot_approve and is_author(user, _writers(lh, table, branch, batch)):
        whose = "a branch" if batch is None else f"a table of batch {batch.name}"
        msg = (
            f"{user} may not approve {table} {branch}: the author of {whose} cannot approve it"
            f" (policy {policy.source})"
        )
        raise s.refuse(
            Action.APPROVE, RefusedError(msg, "self_approval"), table=table, branch=branch, notify_it=False
        )


def _review_head(
    session: Session | Lakehouse,
    table: TableId,
    branch: str,
    verdict: Verdict,
    comment: str | None,
    user: str | None,
) -> ReviewStatus:
    """The one path of both verdicts: authorize, check the comment (and the self-approval policy), record,
    notify a request for changes; the branch's review status after it."""
    s = session_of(session, user)
    lh, user = s.lakehouse, s.user
    validate_branch(branch)
    approving = verdict is Verdict.APPROVED
    s.authorize(
        Permission.APPROVE,
        table=table,
        branch=branch,
        action=None if approving else Action.REQUEST_CHANGES,
    )
    text = _clean_text(
        comment, "the comment" if approving else "the comment (--comment)", required=not approving
    )
    batch = batch_of(lh, table, branch)  # in a batch: the review binds to every table's head
    if approving:
        _refuse_self_approval(s, table, branch, batch)
    (rv,) = _record_review(
        lh, user, [table], branch, verdict, text, s.policy().role_of(user), batch.heads if batch else None
    )
    head = rv.snapshot_id
    if not approving:
        emit(
            lh.journal,
            lh.settings,
            Event.CHANGES_REQUESTED,
            table=str(table),
            branch=branch,
            user=user,
            status=ReviewState.CHANGES_REQUESTED.value,
            summary=f"changes requested by {user}: {text}"[:500],
            snapshot_id=head,
        )
    return review_state(lh, table, branch)


@dataclass(frozen=True)
class BatchReview:
    """A verdict on a whole batch (``approve --batch``): the heads it binds to and every table's review status
    after it, sorted by table. JSON keys: batch, verdict, review (the batch's state), heads, tables."""

    __json__: ClassVar[JsonOrder] = ("batch", "verdict", "review", "heads", "tables")

    batch: str
    verdict: Verdict
    heads: Mapping[str, int]
    tables: tuple[ReviewStatus, ...]

    @property
    def review(self) -> ReviewState:
        """The batch's review state (JSON ``review``), as :attr:`state`."""
        return self.state

    @property
    def state(self) -> ReviewState:
        """The batch's review state: changes requested on any table, else awaiting on any, else approved/none."""
        states = {t.state for t in self.tables}
        for st in (ReviewState.CHANGES_REQUESTED, ReviewState.AWAITING, ReviewState.APPROVED):
            if st in states:
                return st
        return ReviewState.NONE


def _review_batch(
    session: Session | Lakehouse, name: str, verdict: Verdict, comment: str | None, user: str | None
) -> BatchReview:
    """Both verdicts on a batch: authorize on every table, refuse an author of any table (when a table's policy
    says so), record one review per table bound to the batch's heads, in one transaction."""
    s = session_of(session, user)
    lh, user = s.lakehouse, s.user
    batch = load_batch(lh, name)
    approving = verdict is Verdict.APPROVED
    for table in batch.table_ids:
        s.authorize(
            Permission.APPROVE,
            table=table,
            branch=batch.name,
            action=None if approving else Action.REQUEST_CHANGES,
        )
    text = _clean_text(
        comment, "the comment" if approving else "the comment (--comment)", required=not approving
    )
    if approving:
        for table in batch.table_ids:
            _refuse_self_approval(s, table, batch.name, batch)
    _record_review(
        lh, user, batch.table_ids, batch.name, verdict, text, s.policy().role_of(user), batch.heads
    )
    for table in [] if approving else batch.table_ids:  # each table's subscribers hear of it
        emit(
            lh.journal,
            lh.settings,
            Event.CHANGES_REQUESTED,
            table=str(table),
            branch=batch.name,
            user=user,
            status=ReviewState.CHANGES_REQUESTED.value,
            summary=f"changes requested on batch {batch.name} by {user}: {text}"[:500],
            snapshot_id=batch.heads[str(table)],
        )
    states = tuple(review_state(lh, t, batch.name) for t in batch.table_ids)
    return BatchReview(batch.name, verdict, dict(batch.heads), states)


def approve_batch(
    session: Session | Lakehouse, name: str, *, comment: str | None = None, user: str | None = None
) -> BatchReview:
    """Approve the batch ``name``: one approval on every table, bound to the set of its tables' heads (a new
    commit on any of them dismisses it). An author of any table is refused where a table's policy says so."""
    return _review_batch(session, name, Verdict.APPROVED, comment, user)


def request_changes_batch(
    session: Session | Lakehouse, name: str, *, comment: str, user: str | None = None
) -> BatchReview:
    """Request changes on the batch ``name``: on every table, bound to its tables' heads; blocks its publish."""
    return _review_batch(session, name, Verdict.CHANGES_REQUESTED, comment, user)


def approve(
    session: Session | Lakehouse,
    table: TableId,
    branch: str,
    *,
    comment: str | None = None,
    user: str | None = None,
) -> ReviewStatus:
    """Approve the branch's current head (approver role). Self-approval is refused where the policy says so."""
    return _review_head(session, table, branch, Verdict.APPROVED, comment, user)


def request_changes(
    session: Session | Lakehouse, table: TableId, branch: str, *, comment: str, user: str | None = None
) -> ReviewStatus:
    """Request changes on the branch's current head (approver role); blocks publish until that reviewer approves."""
    return _review_head(session, table, branch, Verdict.CHANGES_REQUESTED, comment, user)


def add_comment(
    session: Session | Lakehouse,
    table: TableId,
    branch: str,
    text: str,
    *,
    check: str | None = None,
    user: str | None = None,
) -> Comment:
    """Add a comment to the branch's thread (steward role); optionally about one check."""
    s = session_of(session, user)
    lh, user = s.lakehouse, s.user
    validate_branch(branch)
    s.authorize(Permission.COMMENT, table=table, branch=branch)
    body = _clean_text(text, "the comment", required=True)
    assert body is not None
    check_name = _clean_text(check, "the check name", required=False)
    if check_name is not None and (len(check_name) > MAX_CHECK or "\n" in check_name):
        raise ValidationError(f"the check name must be one line of at most {MAX_CHECK} characters")
    head = cat.require_branch(lh.table(table), table, branch)
    now = utcnow()
    with lh.journal.engine.begin() as conn:
        pk = _insert_comment(conn, now, user, table, branch, head, CommentKind.COMMENT, body, check_name)
    return Comment(pk, now, user, str(table), branch, head, check_name, CommentKind.COMMENT, body)


def comments(
    session: Session | Lakehouse, table: TableId, branch: str, *, user: str | None = None
) -> list[Comment]:
    """The branch's thread, oldest first (also after the branch was published or discarded)."""
    s = session_of(session, user)
    lh, user = s.lakehouse, s.user
    validate_branch(branch)
    s.authorize(Permission.READ, table=table, branch=branch)
    return [_comment(r) for r in _branch_rows(lh, comments_table, table, branch)]


def approve_decision(lh: Lakehouse, table: TableId, branch: str, user: str) -> tuple[bool, str]:
    """Whether ``user`` may approve the head now, and why not (for the console's disabled button). Pure."""
    d = decide(access_policy(lh.settings), user, Permission.APPROVE)
    if not d.allowed:
        return False, d.message
    policy = policy_for(lh, table)
    if policy.author_cannot_approve and is_author(
        user, _writers(lh, table, branch, batch_of(lh, table, branch))
    ):
        return False, f"the author of a branch cannot approve it (policy {policy.source})"
    return True, d.message
