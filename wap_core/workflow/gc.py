"""Retention (``python -m wap_core gc``): expire stale branches, remove leftovers, expire old snapshots.

Per table, in this order:

1. **Branches.** Open branches older than the table's TTL are discarded (journaled as action
   ``discard``, outcome ``expired``, the reason naming the TTL). Temporary rebase branches (names
   holding ``__rebase_``) and branches whose status is ``incomplete`` (a crashed ingest) are removed
   (outcome ``removed``) once older than ``grace``: younger ones may belong to a rebase or ingest
   still running. A branch's age runs from its first commit after the fork (a rebase replays the batch
   as a new commit, so it restarts the clock), else from its creation in the journal, else from its
   head snapshot. TTL: table property ``wap.branch-ttl`` or
   ``Settings.branch_ttl`` (``WAP_BRANCH_TTL``, default 14d).
2. **Snapshots.** Snapshots older than the retention are expired with Iceberg's Spark procedure
   ``expire_snapshots``, which deletes the data, delete and manifest files no retained snapshot
   needs. Retention: ``--older-than``, else table property ``history.expire.max-snapshot-age-ms``
   (Iceberg's own name), else ``Settings.snapshot_retention`` (``WAP_SNAPSHOT_RETENTION``, 30d);
   the newest ``history.expire.min-snapshots-to-keep`` (default 1) of main always stay.

3. **Batch tags.** A ``batch-<name>`` tag (what a batch's publish tags every table with) ages out with the
   batch's snapshots: a tag whose snapshot the retention would expire were the tag not there is removed
   first (a ref move journaled as a ``discard`` of the tag, outcome ``expired``), so its snapshot expires
   with the rest. A tag on a snapshot still kept (main's head, an open branch's fork, young) stays. Other
   tags keep their snapshots as before.
4. **Orphan metadata files.** ``*.metadata.json`` files in the table's metadata folder that neither the
   current metadata nor its metadata-log references (a lost race's, a killed commit's: see
   :mod:`wap_core.lake.orphans`), older than ``grace`` (a younger one may belong to a commit in flight), are
   deleted, on the local file system or S3; journaled (action ``gc``, outcome ``removed``, their names).

Iceberg keeps every snapshot a ref points at, but of a branch's ancestry only what is younger than
``older_than`` (and ``retain_last`` snapshots): an open branch's fork is an ancestor of its head, so
Iceberg alone would expire an old fork, and with it the branch's link to main (the newest common
ancestor wap_core's lineage, publish, rebase and diff need). So wap_core computes the exact set
itself: never expired are each open branch's snapshots down to and including its fork, main's
ancestry down to the oldest fork of an open branch (kept contiguous so that fork stays reachable from
main), every ref's head and every tag. The set goes to the procedure as ``snapshot_ids``, with
``older_than`` clamped to the oldest protected snapshot so Iceberg's own age rule cannot reach further;
a mirror of Iceberg's rule checks that beforehand (ref-level retention settings could), and the table
is skipped, with the reason, if it would. Files and bytes reclaimed: the procedure's deleted-file
counts, and the data/delete files reachable from the table's snapshots before minus after (sizes from
the manifests, read with PyIceberg). ``dry_run`` changes nothing, starts no Spark, and reports the same
plan.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import TYPE_CHECKING, ClassVar

from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table
from pyiceberg.table.refs import SnapshotRef, SnapshotRefType
from pyiceberg.table.snapshots import Snapshot

from wap_core.durations import format_duration, parse_duration
from wap_core.exceptions import BranchBusyError, CommitConflictError, ValidationError
from wap_core.identifiers import MAIN, TableId
from wap_core.lake import catalog as cat
from wap_core.lake.catalog import file_io_properties
from wap_core.lake.orphans import delete_orphans, orphan_metadata_files
from wap_core.lake.refs import commit_conflicts, remove_branch
from wap_core.notify import Event
from wap_core.security.access import Permission
from wap_core.session import Session, session_of
from wap_core.states import Action, BranchStatus, Outcome
from wap_core.store.journal import Intent
from wap_core.values import JsonOrder
from wap_core.workflow.reconcile import reconciled_table
from wap_core.workflow.refmove import Moved, Notice, RefMove
from wap_core.workflow.status import BranchInfo, list_branches

if TYPE_CHECKING:
    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)

TTL_PROPERTY = "wap.branch-ttl"
MAX_SNAPSHOT_AGE_PROPERTY = "history.expire.max-snapshot-age-ms"  # Iceberg's table property
MIN_SNAPSHOTS_PROPERTY = "history.expire.min-snapshots-to-keep"  # Iceberg's table property
MAX_REF_AGE_PROPERTY = "history.expire.max-ref-age-ms"  # Iceberg's table property
TEMP_MARKER = "__rebase_"
BATCH_TAG_PREFIX = "batch-"  # a batch publish's tag (workflow.batch.batch_tag)
DEFAULT_GRACE = timedelta(hours=1)
_FOREVER_MS = 2**63 - 1


class GcKind(str, Enum):
    """What gc makes of one branch: expired (discarded), temp / incomplete (removed) or kept."""

    EXPIRED = "expired"
    TEMP = "temp"  # a temporary rebase branch left behind
    INCOMPLETE = "incomplete"  # an ingest that never finished
    KEPT = "kept"

    @property
    def group(self) -> str:
        """The list of :class:`TableGc` it goes in: ``expired``, ``removed`` or ``kept``."""
        return "removed" if self in (GcKind.TEMP, GcKind.INCOMPLETE) else self.value


@dataclass(frozen=True)
class BranchGc:
    """One branch gc looked at: expired, removed (temp / incomplete) or kept."""

    branch: str
    kind: GcKind
    age_seconds: float
    ttl: str
    head_snapshot_id: int
    done: bool  # False in a dry run, or when the branch changed under gc (then kept)
    reason: str


@dataclass(frozen=True)
class TableGc:
    """What garbage collection did (or would do) to one table."""

    table: str
    branch_ttl: str
    branch_ttl_source: str  # wap.branch-ttl | settings
    snapshot_retention: str
    retention_source: str  # --older-than | history.expire.max-snapshot-age-ms | settings
    older_than: str  # ISO time: snapshots older than this may expire
    retain_last: int
    expired_branches: tuple[BranchGc, ...]
    removed_branches: tuple[BranchGc, ...]
    kept_branches: tuple[BranchGc, ...]
    protected_snapshot_ids: tuple[int, ...]  # forks of open branches: never expired
    expired_snapshot_ids: tuple[int, ...]
    snapshots_expired: int
    data_files_deleted: int
    delete_files_deleted: int
    manifest_files_deleted: int
    manifest_lists_deleted: int
    bytes_reclaimed: int  # data + delete files
    skipped: str | None = None  # why snapshots were not expired on this table
    expired_tags: tuple[str, ...] = ()  # batch-<name> tags aged out with their snapshots
    orphan_metadata_files: tuple[
        str, ...
    ] = ()  # unreferenced *.metadata.json files removed (older than grace)


@dataclass(frozen=True)
class GcResult:
    """What garbage collection did (or, in a dry run, would do) to every table (its JSON adds the totals)."""

    __json__: ClassVar[JsonOrder] = (..., "totals")

    dry_run: bool
    older_than_override: str | None
    tables: tuple[TableGc, ...] = field(default_factory=tuple)

    def totals(self) -> dict[str, int]:
        """The sums over all tables: snapshots and files expired, bytes reclaimed, branches expired and removed."""
        keys = (
            "snapshots_expired",
            "data_files_deleted",
            "delete_files_deleted",
            "manifest_files_deleted",
            "manifest_lists_deleted",
            "bytes_reclaimed",
        )
        out = {k: sum(int(getattr(t, k)) for t in self.tables) for k in keys}
        out["expired_branches"] = sum(len(t.expired_branches) for t in self.tables)
        out["expired_tags"] = sum(len(t.expired_tags) for t in self.tables)
        out["orphan_metadata_files"] = sum(len(t.orphan_metadata_files) for t in self.tables)
        out["removed_branches"] = sum(len(t.removed_branches) for t in self.tables)
        return out

    def lines(self) -> list[str]:
        """The text report of ``python -m wap_core gc``."""
        would = "would be " if self.dry_run else ""
        out = [f"gc{' (dry run: nothing changed)' if self.dry_run else ''}: {len(self.tables)} table(s)"]
        for t in self.tables:
            out.append(
                f"{t.table}: branch TTL {t.branch_ttl} ({t.branch_ttl_source}), snapshot retention "
                f"{t.snapshot_retention} ({t.retention_source})"
            )
            for b in t.expired_branches + t.removed_branches:
                out.append(
                    f"  {b.branch}: {would}{'discarded' if b.kind is GcKind.EXPIRED else 'removed'}: {b.reason}"
                )
            for b in t.kept_branches:
                out.append(f"  {b.branch}: kept: {b.reason}")
            if t.expired_tags:
                out.append(f"  batch tags {would}aged out with their snapshots: {', '.join(t.expired_tags)}")
            if t.orphan_metadata_files:
                out.append(f"  orphan metadata files {would}removed: {len(t.orphan_metadata_files)}")
            if t.skipped:
                out.append(f"  snapshots: skipped: {t.skipped}")
            else:
                out.append(
                    f"  snapshots older than {t.older_than}: {t.snapshots_expired} {would}expired, "
                    f"{t.data_files_deleted} data file(s) and {t.delete_files_deleted} delete file(s) "
                    f"({t.bytes_reclaimed} bytes), {t.manifest_files_deleted} manifest(s) {would}deleted"
                    + (
                        f"; kept forks of open branches: {', '.join(map(str, t.protected_snapshot_ids))}"
                        if t.protected_snapshot_ids
                        else ""
                    )
                )
        tot = self.totals()
        out.append(
            f"total: {tot['expired_branches']} branch(es) {would}expired, {tot['removed_branches']} {would}removed, "
            f"{tot['snapshots_expired']} snapshot(s) {would}expired, {tot['data_files_deleted']} data file(s), "
            f"{tot['bytes_reclaimed']} bytes {would}reclaimed"
        )
        return out


@dataclass(frozen=True)
class ExpiryPlan:
    """Which snapshots expire; computed from metadata alone."""

    expire: tuple[int, ...]
    protected: frozenset[int]  # open branches down to their forks + main down to the oldest fork
    forks: Mapping[str, int]  # open branch -> fork snapshot id
    older_than_ms: int  # what the procedure gets: the cutoff clamped to the oldest protected snapshot


# ----- policy -------------------------------------------------------------------------------------
def _ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()


def _int_property(props: Mapping[str, str], key: str, table: TableId) -> int | None:
    raw = props.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise ValidationError(f"table {table}: property {key}={raw!r} is not an integer") from exc
    if value < 0:
        raise ValidationError(f"table {table}: property {key}={raw!r} must not be negative")
    return value


def branch_ttl(lh: Lakehouse, table: TableId, props: Mapping[str, str]) -> tuple[timedelta, str]:
    """The table's branch TTL and where it comes from."""
    if TTL_PROPERTY in props:
        return parse_duration(props[TTL_PROPERTY], f"{TTL_PROPERTY} of {table}"), TTL_PROPERTY
    return parse_duration(lh.settings.branch_ttl, "branch_ttl"), "settings"


def snapshot_retention(
    lh: Lakehouse, table: TableId, props: Mapping[str, str], override: timedelta | None
) -> tuple[timedelta, str]:
    """How long the table's snapshots are kept and where that came from (option, table property or settings)."""
    if override is not None:
        return override, "--older-than"
    ms = _int_property(props, MAX_SNAPSHOT_AGE_PROPERTY, table)
    if ms is not None:
        return timedelta(milliseconds=ms), MAX_SNAPSHOT_AGE_PROPERTY
    return parse_duration(lh.settings.snapshot_retention, "snapshot_retention"), "settings"


def _ancestors(snapshots: Mapping[int, Snapshot], snapshot_id: int | None) -> Iterable[Snapshot]:
    while snapshot_id is not None and (snap := snapshots.get(snapshot_id)) is not None:
        yield snap
        snapshot_id = snap.parent_snapshot_id


def _is_branch(ref: SnapshotRef) -> bool:
    return ref.snapshot_ref_type == SnapshotRefType.BRANCH


def plan_expiry(
    snapshots: Mapping[int, Snapshot], refs: Mapping[str, SnapshotRef], cutoff_ms: int, retain_last: int
) -> ExpiryPlan:
    """The snapshots to expire, given the refs that stay (open branches, tags, main)."""
    main_ref = refs.get(MAIN)
    main_chain = [s.snapshot_id for s in _ancestors(snapshots, main_ref.snapshot_id if main_ref else None)]
    main_pos = {sid: i for i, sid in enumerate(main_chain)}
    protected: set[int] = set()
    forks: dict[str, int] = {}
    for name, ref in refs.items():
        if name == MAIN or not _is_branch(ref):
            continue
        for snap in _ancestors(
            snapshots, ref.snapshot_id
        ):  # head .. fork (the whole chain if unrelated to main)
            protected.add(snap.snapshot_id)
            if snap.snapshot_id in main_pos:
                forks[name] = snap.snapshot_id
                break
    if forks:  # main stays contiguous down to the oldest fork, or lineage could not find it from main
        protected.update(main_chain[: max(main_pos[f] for f in forks.values()) + 1])
    retained = set(protected) | {ref.snapshot_id for ref in refs.values()}
    for i, sid in enumerate(main_chain):
        if i < retain_last or snapshots[sid].timestamp_ms >= cutoff_ms:
            retained.add(sid)
        else:
            break
    in_branches = {
        s.snapshot_id
        for ref in refs.values()
        if _is_branch(ref)
        for s in _ancestors(snapshots, ref.snapshot_id)
    }
    retained.update(
        sid for sid, s in snapshots.items() if sid not in in_branches and s.timestamp_ms >= cutoff_ms
    )
    clamp = min([cutoff_ms, *(snapshots[sid].timestamp_ms for sid in protected if sid in snapshots)])
    return ExpiryPlan(tuple(sorted(set(snapshots) - retained)), frozenset(protected), forks, clamp)


def iceberg_would_remove(
    snapshots: Mapping[int, Snapshot],
    refs: Mapping[str, SnapshotRef],
    props: Mapping[str, str],
    older_than_ms: int,
    retain_last: int,
    now_ms: int,
) -> tuple[set[int], set[str]]:
    """Mirror of Iceberg's RemoveSnapshots rule (1.10): (snapshots its age rule removes, refs it drops)."""
    default_ref_age = int(props.get(MAX_REF_AGE_PROPERTY, _FOREVER_MS))
    kept_refs: dict[str, SnapshotRef] = {}
    for name, ref in refs.items():
        snap = snapshots.get(ref.snapshot_id)
        max_age = ref.max_ref_age_ms if ref.max_ref_age_ms is not None else default_ref_age
        if name == MAIN or (snap is not None and now_ms - snap.timestamp_ms <= max_age):
            kept_refs[name] = ref
    retained = {ref.snapshot_id for ref in kept_refs.values()}
    for ref in kept_refs.values():
        if not _is_branch(ref):
            continue
        older = now_ms - ref.max_snapshot_age_ms if ref.max_snapshot_age_ms is not None else older_than_ms
        keep = ref.min_snapshots_to_keep if ref.min_snapshots_to_keep is not None else retain_last
        chain: set[int] = set()
        for snap in _ancestors(snapshots, ref.snapshot_id):
            if len(chain) < keep or snap.timestamp_ms >= older:
                chain.add(snap.snapshot_id)
            else:
                break
        retained |= chain
    referenced = {ref.snapshot_id for ref in kept_refs.values()}
    for ref in kept_refs.values():
        if _is_branch(ref):
            referenced.update(s.snapshot_id for s in _ancestors(snapshots, ref.snapshot_id))
    retained.update(
        sid for sid, s in snapshots.items() if sid not in referenced and s.timestamp_ms >= older_than_ms
    )
    return set(snapshots) - retained, set(refs) - set(kept_refs)


# ----- files --------------------------------------------------------------------------------------
@dataclass
class _Reach:
    files: dict[str, tuple[int, int]]  # path -> (content, size)
    manifests: set[str]


def _reachable(
    tbl: Table, snapshot_ids: Iterable[int], cache: dict[str, list[tuple[str, int, int]]]
) -> _Reach:
    """Data/delete files and manifests reachable from ``snapshot_ids`` (manifests read once, cached)."""
    reach = _Reach({}, set())
    for sid in snapshot_ids:
        snap = tbl.metadata.snapshot_by_id(sid)
        if snap is None:
            continue
        for manifest in snap.manifests(tbl.io):
            if manifest.manifest_path in reach.manifests:
                continue
            reach.manifests.add(manifest.manifest_path)
            if manifest.manifest_path not in cache:
                cache[manifest.manifest_path] = [
                    (e.data_file.file_path, int(e.data_file.content), int(e.data_file.file_size_in_bytes))
                    for e in manifest.fetch_manifest_entry(tbl.io, discard_deleted=True)
                ]
            for path, content, size in cache[manifest.manifest_path]:
                reach.files[path] = (content, size)
    return reach


def _gone(before: _Reach, after: _Reach) -> tuple[int, int, int, int]:
    """(data files, delete files, manifests, bytes of data + delete files) in ``before`` but not ``after``."""
    paths = set(before.files) - set(after.files)
    data = sum(1 for p in paths if before.files[p][0] == int(DataFileContent.DATA))
    size = sum(before.files[p][1] for p in paths)
    return data, len(paths) - data, len(before.manifests - after.manifests), size


# ----- the run ------------------------------------------------------------------------------------
def _age_ms(tbl: Table, name: str, created: datetime | None) -> int:
    """When the branch started: its first commit after the fork, else its journaled creation, else its head."""
    lin = cat.lineage(tbl, name)
    if lin.new_snapshots:
        return int(lin.new_snapshots[0].timestamp_ms)
    if created is not None:
        return _ms(created)
    head = tbl.metadata.snapshot_by_id(lin.head)
    return int(head.timestamp_ms) if head is not None else 0


def _remove_branch(lh: Lakehouse, table: TableId, name: str, head: int) -> bool:
    """Remove ``name`` if it is still at ``head``; False when it moved or went (then it is not stale)."""
    try:
        return remove_branch(lh.catalog, table, name, head=head)
    except CommitConflictError as exc:  # every attempt lost a race with other changes: try on the next run
        log.warning("gc could not remove branch %s of %s: %s", name, table, exc)
        return False


def _gc_removal(
    lh: Lakehouse, table: TableId, name: str, head: int, kind: GcKind
) -> Callable[[Intent], Moved]:
    """gc's commit step: remove ``name`` while it is at ``head`` (``expired``/``removed``), else abandoned."""

    def commit(_: Intent) -> Moved:
        if _remove_branch(lh, table, name, head):
            return Moved(Outcome.EXPIRED if kind is GcKind.EXPIRED else Outcome.REMOVED)
        return Moved(
            Outcome.ABANDONED, done=False, details={"why": "the branch changed while gc looked at it"}
        )

    return commit


def _gc_notice(kind: GcKind, reason: str) -> Callable[[Moved], Notice | None]:
    """An expired branch is notified; a removed leftover (temp, incomplete) is not."""
    return lambda _: Notice(Event.EXPIRED, reason, None) if kind is GcKind.EXPIRED else None


def collect_garbage(
    session: Session | Lakehouse,
    *,
    older_than: timedelta | str | None = None,
    dry_run: bool = False,
    tables: Iterable[TableId] | None = None,
    user: str | None = None,
    grace: timedelta = DEFAULT_GRACE,
) -> GcResult:
    """Apply the retention rules (module docstring) to ``tables`` (default: every table)."""
    s = session_of(session, user)
    lh, user = s.lakehouse, s.user
    s.authorize(Permission.ADMIN, action=Action.GC)
    override = parse_duration(older_than, "--older-than") if isinstance(older_than, str) else older_than
    if override is not None and override < timedelta(0):
        raise ValidationError("--older-than must not be negative")
    results = [
        _gc_table(lh, t, override, dry_run, user, grace)
        for t in (list(tables) if tables is not None else lh.tables())
    ]
    return GcResult(dry_run, format_duration(override) if override is not None else None, tuple(results))


def _gc_branches(
    lh: Lakehouse, table: TableId, tbl: Table, rule: _BranchRule, now_ms: int, dry_run: bool, user: str
) -> dict[str, list[BranchGc]]:
    """Every branch but main (rebase temp branches included: cat.branch_names hides those), classified by
    ``rule`` and, unless ``dry_run``, expired or removed: ``expired`` / ``removed`` / ``kept``."""
    sorted_out: dict[str, list[BranchGc]] = {"expired": [], "removed": [], "kept": []}
    infos = {b.branch: b for b in list_branches(lh, table)}
    for name in sorted(n for n, r in tbl.metadata.refs.items() if _is_branch(r) and n != MAIN):
        info = infos.get(name)
        created = datetime.fromisoformat(info.created) if info is not None and info.created else None
        age = timedelta(milliseconds=max(0, now_ms - _age_ms(tbl, name, created)))
        head = tbl.metadata.refs[name].snapshot_id
        kind, reason = rule.classify(name, info, age)
        done = False
        if kind is not GcKind.KEPT and not dry_run:
            kind, reason, done = _gc_branch(lh, user, table, name, head, kind, reason, rule, age)
        entry = BranchGc(name, kind, age.total_seconds(), format_duration(rule.ttl), head, done, reason)
        sorted_out[kind.group].append(entry)
    return sorted_out


def _gc_table(
    lh: Lakehouse, table: TableId, override: timedelta | None, dry_run: bool, user: str, grace: timedelta
) -> TableGc:
    tbl = reconciled_table(lh, table)
    props = dict(tbl.properties)
    ttl, ttl_source = branch_ttl(lh, table, props)
    retention, retention_source = snapshot_retention(lh, table, props, override)
    retain_last = max(1, _int_property(props, MIN_SNAPSHOTS_PROPERTY, table) or 1)
    now_ms = _ms(datetime.now(UTC))

    # 1. branches
    rule = _BranchRule(ttl, ttl_source, grace)
    sorted_out = _gc_branches(lh, table, tbl, rule, now_ms, dry_run, user)
    expired, removed, kept = sorted_out["expired"], sorted_out["removed"], sorted_out["kept"]

    # 2. snapshots, on the refs that stay
    if not dry_run and (expired or removed):
        tbl = lh.table(table)
    gone = {b.branch for b in expired + removed}
    refs = {n: r for n, r in tbl.metadata.refs.items() if n not in gone}
    snapshots = {s.snapshot_id: s for s in tbl.metadata.snapshots}
    cutoff_ms = now_ms - int(retention.total_seconds() * 1000)
    # 2a. batch tags whose snapshot would expire but for the tag: removed first, so it expires with the rest
    aged = aged_batch_tags(snapshots, refs, cutoff_ms, retain_last)
    if aged and not dry_run:
        aged = tuple(n for n in aged if _expire_tag(lh, user, table, n, refs[n].snapshot_id, retention))
    refs = {n: r for n, r in refs.items() if n not in aged}
    plan = plan_expiry(snapshots, refs, cutoff_ms, retain_last)
    skipped = _why_not_expire(snapshots, refs, props, plan, retain_last, now_ms)
    expire = plan.expire if skipped is None else ()
    counts = {"data": 0, "deletes": 0, "manifests": 0, "lists": 0, "bytes": 0}
    if expire:
        cache: dict[str, list[tuple[str, int, int]]] = {}
        before = _reachable(tbl, snapshots, cache)
        data, deletes, manifests, size = _gone(before, _reachable(tbl, set(snapshots) - set(expire), cache))
        counts = {
            "data": data,
            "deletes": deletes,
            "manifests": manifests,
            "lists": len(expire),
            "bytes": size,
        }
        if not dry_run:
            why = f"snapshot retention {format_duration(retention)} ({retention_source}): expired snapshots older than {_iso(cutoff_ms)}"
            counts = _expire(lh, table, plan, expire, retain_last, before, cache, user, why)
    # 3. metadata files nothing references (a lost race's, a killed commit's), older than the grace
    orphans = _orphans(lh, table, now_ms, grace, dry_run, user)
    return TableGc(
        table=str(table),
        branch_ttl=format_duration(ttl),
        branch_ttl_source=ttl_source,
        snapshot_retention=format_duration(retention),
        retention_source=retention_source,
        older_than=_iso(cutoff_ms),
        retain_last=retain_last,
        expired_branches=tuple(expired),
        removed_branches=tuple(removed),
        kept_branches=tuple(kept),
        protected_snapshot_ids=tuple(sorted(set(plan.forks.values()))),
        expired_snapshot_ids=tuple(expire),
        snapshots_expired=len(expire),
        data_files_deleted=counts["data"],
        delete_files_deleted=counts["deletes"],
        manifest_files_deleted=counts["manifests"],
        manifest_lists_deleted=counts["lists"],
        bytes_reclaimed=counts["bytes"],
        skipped=skipped,
        expired_tags=aged,
        orphan_metadata_files=orphans,
    )


def aged_batch_tags(
    snapshots: Mapping[int, Snapshot], refs: Mapping[str, SnapshotRef], cutoff_ms: int, retain_last: int
) -> tuple[str, ...]:
    """The ``batch-<name>`` tags whose snapshot the retention expires were the tag not there (sorted)."""
    tags = {n for n, r in refs.items() if n.startswith(BATCH_TAG_PREFIX) and not _is_branch(r)}
    if not tags:
        return ()
    plan = plan_expiry(snapshots, {n: r for n, r in refs.items() if n not in tags}, cutoff_ms, retain_last)
    expire = set(plan.expire)
    return tuple(sorted(n for n in tags if refs[n].snapshot_id in expire))


def _expire_tag(
    lh: Lakehouse, user: str, table: TableId, name: str, snapshot_id: int, retention: timedelta
) -> bool:
    """Remove the batch tag ``name`` while it is at ``snapshot_id``, as a ref move (journaled as a discard of
    the tag, outcome ``expired``; reconciled like one after a crash); whether it went."""
    reason = f"batch tag aged out with its snapshot (snapshot retention {format_duration(retention)})"
    move = RefMove(
        session_of(lh, user),
        Action.DISCARD,
        table,
        name,
        snapshot_id,
        reason=reason,
        details={"gc": True, "kind": "batch_tag"},
    )
    try:
        intent = move.begin(journal_busy=False)
    except BranchBusyError:
        return False

    def commit(_: Intent) -> Moved:
        t = lh.table(table)
        ref = t.metadata.refs.get(name)
        if ref is None or ref.snapshot_id != snapshot_id:
            return Moved(
                Outcome.ABANDONED, done=False, details={"why": "the tag changed while gc looked at it"}
            )
        try:
            with commit_conflicts():
                t.manage_snapshots().remove_tag(name).commit()
        except CommitConflictError as exc:  # another change won: the tag stays until the next run
            log.warning("gc could not remove tag %s of %s: %s", name, table, exc)
            return Moved(Outcome.ABANDONED, done=False, details={"why": f"lost a race: {exc}"})
        return Moved(Outcome.EXPIRED)

    return move.run(commit, intent=intent).done


def _orphans(
    lh: Lakehouse, table: TableId, now_ms: int, grace: timedelta, dry_run: bool, user: str
) -> tuple[str, ...]:
    """The table's orphan metadata files older than ``grace``, deleted unless ``dry_run`` (journaled)."""
    tbl = lh.table(table)
    props = file_io_properties(lh.settings)
    written_before = datetime.fromtimestamp(now_ms / 1000, tz=UTC) - grace
    try:
        found = orphan_metadata_files(tbl, props, written_before=written_before)
        if dry_run or not found:
            return tuple(f.path for f in found)
        done = delete_orphans(lh.table(table), props, found)
    except (
        OSError
    ) as exc:  # the folder cannot be listed or a file deleted here: reported, tried again next run
        log.warning("gc could not clean the orphan metadata files of %s: %s", table, exc)
        return ()
    if done:
        lh.journal.record(
            user=user,
            action=Action.GC,
            table=str(table),
            outcome=Outcome.REMOVED,
            reason=f"metadata files no pointer references, older than the grace {format_duration(grace)}",
            details={"gc": True, "orphan_metadata_files": [f.path for f in done]},
        )
    return tuple(f.path for f in done)


@dataclass(frozen=True)
class _BranchRule:
    """Which open branches gc removes: expired ones (older than the TTL), and temporary rebase branches and
    incomplete ingests left behind (older than ``grace``, so a running rebase or ingest keeps its branch)."""

    ttl: timedelta
    ttl_source: str
    grace: timedelta

    def classify(self, name: str, info: BranchInfo | None, age: timedelta) -> tuple[GcKind, str]:
        """``(kind, reason)``: kind is ``kept``, ``expired``, ``temp`` or ``incomplete``."""
        old, ttl, grace = format_duration(age.total_seconds() // 1), format_duration(self.ttl), self.grace
        if TEMP_MARKER in name:
            if age >= grace:
                return GcKind.TEMP, f"temporary rebase branch left behind ({old} old)"
            return (
                GcKind.KEPT,
                f"temporary rebase branch younger than {format_duration(grace)}: a rebase may still be running",
            )
        if info is not None and info.status is BranchStatus.INCOMPLETE:
            if age >= grace:
                return GcKind.INCOMPLETE, f"incomplete ingest left behind ({old} old)"
            return (
                GcKind.KEPT,
                f"incomplete branch younger than {format_duration(grace)}: an ingest may still be running",
            )
        if age > self.ttl:
            return GcKind.EXPIRED, f"expired: open {old}, older than the branch TTL {ttl} ({self.ttl_source})"
        return GcKind.KEPT, f"open {old}, within the branch TTL {ttl}"


def _gc_branch(
    lh: Lakehouse,
    user: str,
    table: TableId,
    name: str,
    head: int,
    kind: GcKind,
    reason: str,
    rule: _BranchRule,
    age: timedelta,
) -> tuple[GcKind, str, bool]:
    """Remove one branch gc picked, as a ref move (intent before, outcome after, reconciled after a crash);
    ``(kind, reason, done)``: kept when another action holds the branch or it changed meanwhile."""
    details = {
        "gc": True,
        "kind": kind.value,
        "age_seconds": age.total_seconds(),
        "ttl": format_duration(rule.ttl),
        "ttl_source": rule.ttl_source,
    }
    move = RefMove(session_of(lh, user), Action.DISCARD, table, name, head, reason=reason, details=details)
    try:
        intent = move.begin(journal_busy=False)
    except BranchBusyError:
        return GcKind.KEPT, "another action on the branch is in flight: not stale", False
    done = move.run(_gc_removal(lh, table, name, head, kind), _gc_notice(kind, reason), intent=intent).done
    if not done:
        return GcKind.KEPT, "the branch changed while gc looked at it: not stale", False
    return kind, reason, True


def _why_not_expire(
    snapshots: Mapping[int, Snapshot],
    refs: Mapping[str, SnapshotRef],
    props: dict[str, str],
    plan: ExpiryPlan,
    retain_last: int,
    now_ms: int,
) -> str | None:
    """Why the planned expiry must not run on this table (None: it may)."""
    if props.get("gc.enabled", "true").lower() == "false":
        return "table property gc.enabled=false: Iceberg refuses to expire snapshots"
    extra, dropped = iceberg_would_remove(snapshots, refs, props, plan.older_than_ms, retain_last, now_ms)
    if dropped or extra - set(plan.expire):
        what = (
            "refs " + ", ".join(sorted(dropped))
            if dropped
            else "snapshots " + ", ".join(map(str, sorted(extra - set(plan.expire))))
        )
        return (
            f"Iceberg's ref retention settings on this table would also remove {what}"
            f" ({MAX_REF_AGE_PROPERTY} / per-ref max-snapshot-age-ms): not expiring"
        )
    return None


def _expire(
    lh: Lakehouse,
    table: TableId,
    plan: ExpiryPlan,
    expire: tuple[int, ...],
    retain_last: int,
    before: _Reach,
    cache: dict[str, list[tuple[str, int, int]]],
    user: str,
    why: str,
) -> dict[str, int]:
    """Run Iceberg's expire_snapshots for exactly ``expire``; the counts it reports and the bytes that went."""
    older = datetime.fromtimestamp(plan.older_than_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    ids = ", ".join(f"{int(s)}L" for s in expire)
    # table is an allowlisted TableId; the timestamp and ids are formatted numbers: no user text reaches SQL
    sql = (
        f"CALL {lh.settings.catalog_name}.system.expire_snapshots(table => '{table}', older_than => TIMESTAMP '{older}+00:00', "
        f"retain_last => {int(retain_last)}, snapshot_ids => array({ids}))"
    )
    row = lh.spark.sql(sql).collect()[0].asDict()
    tbl = lh.table(table)
    after = _reachable(tbl, [s.snapshot_id for s in tbl.metadata.snapshots], cache)
    _, _, _, size = _gone(before, after)
    left = set(expire) & {s.snapshot_id for s in tbl.metadata.snapshots}
    if left:
        log.warning("expire_snapshots on %s left %d planned snapshot(s): %s", table, len(left), sorted(left))
    counts = {
        "data": int(row.get("deleted_data_files_count") or 0),
        "deletes": int(row.get("deleted_position_delete_files_count") or 0)
        + int(row.get("deleted_equality_delete_files_count") or 0),
        "manifests": int(row.get("deleted_manifest_files_count") or 0),
        "lists": int(row.get("deleted_manifest_lists_count") or 0),
        "bytes": size,
    }
    main_head = cat.ref_snapshot_id(tbl, MAIN)
    lh.journal.record(
        user=user,
        action=Action.EXPIRE,
        table=str(table),
        snapshot_before=main_head,
        snapshot_after=main_head,
        outcome=Outcome.EXPIRED,
        reason=why,
        details={"gc": True, "snapshot_ids": list(expire), "protected_forks": dict(plan.forks), **counts},
    )
    return counts
