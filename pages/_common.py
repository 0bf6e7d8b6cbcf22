"""Shared helpers of the console pages: the Lakehouse, the signed-in user, cached metadata, rendering.

Pages stay thin: they read state through these helpers, call ``wap_core`` and render.
Metadata helpers (tables, branches, journal, checks) never start Spark.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import string
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import pandas as pd
import streamlit as st

from wap_core import api
from wap_core.api import (
    BatchRow,
    BranchInfo,
    Context,
    Decision,
    JournalEntry,
    Lakehouse,
    Permission,
    StoredAudit,
    TableInfo,
    TimelineSnapshot,
    spark_running,
)
from wap_core.config import ENV_VARS, mask_secrets
from wap_core.exceptions import WapError, printable
from wap_core.identifiers import TableId
from wap_core.values import to_jsonable

if TYPE_CHECKING:
    from _typeshed import DataclassInstance
    from streamlit.elements.lib.column_types import ColumnConfig

    ColumnConfigs = dict[str, ColumnConfig]  # a grid's column_config: column name -> its configuration

T = TypeVar("T")

# Plain symbols (render with any font, also in headless browsers) plus Material icons for alerts.
STATUS_ICON: dict[str, str] = {
    "passed": "✔",
    "warned": "▲",
    "failed": "✖",
    "error": "✖",
    "not_audited": "○",
    "stale": "↻",
    "incomplete": "◌",
}
STATUS_MATERIAL: dict[str, str] = {
    "passed": ":material/check_circle:",
    "warned": ":material/warning:",
    "failed": ":material/cancel:",
    "error": ":material/error:",
    "not_audited": ":material/radio_button_unchecked:",
    "stale": ":material/update:",
    "incomplete": ":material/hourglass_empty:",
}
STATUS_COLOR: dict[str, str] = {
    "passed": "#2da44e",
    "warned": "#d4a72c",
    "failed": "#cf222e",
    "error": "#8250df",
    "not_audited": "#8c959f",
    "stale": "#e16f24",
    "incomplete": "#57606a",
}
CACHE_TTL = 30  # seconds: metadata caches; every write clears them anyway


# --------------------------------------------------------------------------- resources
@st.cache_resource(show_spinner=False)
def _lakehouse_for(env_key: tuple[tuple[str, str], ...]) -> Lakehouse:
    # The start-up every face shares (wap_core.api.start): a configured file or folder (or an ingest
    # root's bucket) that is not there: app.py shows it, stops. Recovery is a step of its own: crashed
    # actions are reconciled at the console's start and on a background tick (reads never repair); the
    # console then delivers the outbox, also what exited CLI commands left (never raises).
    return api.start(background=True)


def lakehouse() -> Lakehouse:
    """The process-wide Lakehouse (one per distinct WAP_* environment; one SparkSession per process)."""
    key = tuple((k, os.environ.get(k, "")) for k in ENV_VARS)
    return _lakehouse_for(key)


def auth_configured() -> bool:
    """True when the secrets (``.streamlit/secrets.toml`` or ``--secrets.files``) have an ``[auth]`` section.

    Then OIDC sign-in (``st.login``) is on: anonymous visitors see only the sign-in screen and every
    action is journaled under the signed-in identity.
    """
    return bool(st.secrets.load_if_toml_exists() and "auth" in st.secrets)


def secrets_problem() -> str | None:
    """A secrets file that exists but cannot be parsed (sign-in must not silently turn off)."""
    from streamlit import config

    present = [p for p in config.get_option("secrets.files") or [] if Path(p).exists()]
    if present and not st.secrets.load_if_toml_exists():
        return (
            f"the secrets file cannot be parsed ({', '.join(present)}): sign-in is not configured correctly"
        )
    return None


def signed_in_user() -> str | None:
    """The signed-in identity (e-mail, else the OIDC ``sub``), or None when nobody is signed in.

    An e-mail the provider marks as unverified (``email_verified: false``) is not an identity:
    the subject is used instead (and matches no e-mail in the access file).
    """
    if not st.user.is_logged_in:
        return None
    email = st.user.get("email") if st.user.get("email_verified") is not False else None
    who = email or st.user.get("sub")
    return str(who) if who else None


def context() -> Context:
    """This run's context (:func:`wap_core.api.open_context`): the lakehouse and who acts, the signed-in user
    when ``[auth]`` is configured, else WAP_USER or the OS user.

    With sign-in on, an anonymous run never gets an identity: the script stops here.
    """
    who = None
    if auth_configured():
        who = signed_in_user()
        if who is None:
            st.stop()
    return api.open_context(lakehouse(), signed_in=who)


def _reads() -> Context:
    """The context of the cached metadata reads: they are the same for every user (no identity involved)."""
    return api.open_context(lakehouse())


def current_user() -> str:
    """Who acts (:func:`context`'s identity)."""
    return context().user


def may(ctx: Context, permission: Permission) -> Decision:
    """The core's decision (no journaling): pages disable a role-gated control with ``message``."""
    return api.may(ctx, permission)


class SparkStarter:
    """Starts the process's SparkSession in a background thread (one per process), so no page waits in the dark."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.error: str | None = None
        self.started_at: float | None = None

    def start(self, lh: Lakehouse) -> None:
        with self._lock:
            if self.thread is not None or spark_running():
                return
            self.started_at = time.monotonic()
            self.thread = threading.Thread(target=self._run, args=(lh,), name="wap-spark-start", daemon=True)
            self.thread.start()

    def _run(self, lh: Lakehouse) -> None:
        try:
            api.start_spark(api.open_context(lh))  # builds (or joins) the process's one session
        except Exception as exc:  # noqa: BLE001 - shown in the sidebar and on the pages that need Spark
            self.error = mask_secrets(f"{type(exc).__name__}: {exc}".splitlines()[0])
            logging.getLogger(__name__).warning("Spark did not start: %s", self.error)

    @property
    def starting(self) -> bool:
        return self.thread is not None and self.thread.is_alive() and not spark_running()


@st.cache_resource(show_spinner=False)
def spark_starter() -> SparkStarter:
    return SparkStarter()


def start_spark_in_background() -> None:
    """Start Spark in the background when the console starts, unless ``spark_eager`` (WAP_SPARK_EAGER) is off."""
    lh = lakehouse()
    if lh.settings.spark_eager and not spark_running():
        spark_starter().start(lh)


def spark_status() -> str:
    if spark_running():
        return "Spark: running"
    starter = spark_starter()
    if starter.error:
        return f"Spark: failed ({md(starter.error)})"
    if starter.starting:
        return "Spark: starting…"
    return "Spark: not started"


def wait_for_spark(ctx: Context | None = None) -> bool:
    """Before Spark work: a live "Starting Spark…" status until the session is ready. False (error shown) if it failed."""
    if spark_running():
        return True
    starter = spark_starter()
    starter.start(ctx.lakehouse if ctx is not None else lakehouse())
    with st.status("Starting Spark…", expanded=False) as box:
        while starter.starting:
            waited = time.monotonic() - (starter.started_at or time.monotonic())
            box.update(label=f"Starting Spark… ({waited:.0f} s)")
            time.sleep(0.5)
        if not spark_running():
            box.update(label="Spark did not start", state="error")
            st.error(f"Spark did not start: {md(starter.error or 'unknown error')}")
            return False
        box.update(label="Spark is ready", state="complete")
    return True


_DRAWN = "_dialog_drawn"  # a dialog was drawn by this run of the page (reset by run_page)
_P = ParamSpec("_P")


def dialog(title: str, **kw: Any) -> Callable[[Callable[_P, None]], Callable[_P, None]]:
    """``st.dialog`` that notes it was drawn in this run (:func:`dialog_open`)."""

    def wrap(fn: Callable[_P, None]) -> Callable[_P, None]:
        @functools.wraps(fn)  # the same module and name: Streamlit's fragment id of the dialog is unchanged
        def body(*args: _P.args, **kwargs: _P.kwargs) -> None:
            st.session_state[_DRAWN] = True
            fn(*args, **kwargs)

        drawn: Callable[_P, None] = st.dialog(title, **kw)(body)
        return drawn

    return wrap


def dialog_open() -> bool:
    """True when this run of the page drew a dialog (:func:`dialog`).

    A dialog is a fragment: its Confirm reruns only the dialog, and Streamlit queues that rerun until the
    page's run is over; it never interrupts it. A Review whose run went on computing its Spark diffs (a
    minute on a loaded machine) under an open dialog held the Confirm for that long, and lost it (the
    dialog stayed, nothing ran: issue 40 item 1). So a page's Spark work waits while a dialog is open: the
    run that draws the dialog ends at once and the Confirm is taken as soon as it is clicked."""
    return bool(st.session_state.get(_DRAWN))


def writes_done() -> None:
    """Call after any write: every cached metadata view is stale now."""
    st.cache_data.clear()


# One-shot state (a write's success message, what a write just closed) is consumed when the run of the page
# that showed it ENDS (:func:`run_page`), not when it is read: a run can be interrupted at any Streamlit call
# by a newer rerun request (a click, a submit, the browser reconnecting), and a message popped by the
# interrupted run was never seen: the next run shows it again.
_FLASH = "_flash"  # [(kind, message)] queued by writes, shown at the top of the next runs until one ends
_SHOWN = "_flash_shown"  # how many of the queued messages this run has shown
_TAKEN = "_once_taken"  # the session keys this run has read with take()
_PAGE = (
    "_page"  # the page this run shows (its URL path): a queued message belongs to the page it was queued on
)


def flash(kind: str, message: str) -> None:
    """Queue a message shown at the top of the next run of THIS page (survives st.rerun and an interrupted run).

    A result belongs where its action was taken, once: a new one replaces the one before, and a message the
    steward left the page before seeing is dropped, never shown on another page."""
    st.session_state[_FLASH] = [(kind, message, st.session_state.get(_PAGE))]


def show_flash() -> None:
    """Show the queued message of this page (page_header); it is consumed when this run ends (:func:`run_page`).
    Another page's message is dropped."""
    here = st.session_state.get(_PAGE)
    queued = [q for q in st.session_state.get(_FLASH, []) if len(q) < 3 or q[2] == here]
    st.session_state[_FLASH] = queued
    for kind, message, *_ in queued:
        getattr(st, kind)(message)
    st.session_state[_SHOWN] = len(queued)


def take(key: str) -> Any:
    """The one-shot session value ``key`` (e.g. what this session's write just closed), or None: removed when
    this run of the page ends, kept when the run is interrupted (see :func:`run_page`)."""
    st.session_state.setdefault(_TAKEN, set()).add(key)
    return st.session_state.get(key)


def run_page(nav: Any) -> None:
    """Run the page chosen by ``st.navigation`` (app.py). When its run ends, by its last line or by
    ``st.stop()``, what it showed once (:func:`show_flash`, :func:`take`) is consumed; a run ended by a rerun
    (``st.rerun()``, or interrupted by a newer request) consumes nothing, so the next run shows it again.

    ``st.stop()`` raises Streamlit's StopException (``streamlit.runtime.scriptrunner_utils.exceptions``: no
    public hook tells a script that its run is over), a rerun its RerunException, which passes untouched."""
    from streamlit.runtime.scriptrunner_utils.exceptions import StopException

    st.session_state[_SHOWN] = 0
    st.session_state[_TAKEN] = set()
    st.session_state[_PAGE] = getattr(nav, "url_path", None)
    st.session_state[_DRAWN] = False
    try:
        nav.run()
    except StopException:
        _consume()
        raise
    _consume()


def _consume() -> None:
    shown = st.session_state.pop(_SHOWN, 0)
    if shown:
        st.session_state[_FLASH] = st.session_state.get(_FLASH, [])[shown:]
    for key in st.session_state.pop(_TAKEN, set()):
        st.session_state.pop(key, None)


# --------------------------------------------------------------------------- user text -> Markdown
_MD_PUNCT = frozenset(string.punctuation)  # CommonMark: any ASCII punctuation may be backslash-escaped
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
WORD_JOINER = "\u2060"  # invisible, zero width, no line break: splits what GFM would turn into a link
# GFM's literal autolinks (Streamlit's Markdown: remark-gfm) are found in the text AFTER escapes are
# resolved, so a backslash does not stop them: ``http://``/``https://``, ``www.`` and ``name@host.tld``.
# A word joiner after ``://`` (and after any ``:`` followed by ``//``), between ``www`` and ``.`` and
# after ``@`` breaks each pattern while the text reads (and copies) the same.
_AUTOLINK = re.compile(r"(?<=:)(?=//)|(?<=www)(?=\.)|(?<=@)", re.IGNORECASE)


def unlinked(text: str) -> str:
    """``text`` with a word joiner wherever GFM would start a literal autolink (URL, ``www.`` host, e-mail)."""
    return _AUTOLINK.sub(WORD_JOINER, text)


def n_rows(n: int | None, noun: str = "row") -> str:
    """A row count as people write it: ``1 row``, ``2,000 rows`` (``the rows`` when not known yet)."""
    if n is None:
        return f"the {noun}s"
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def md(text: object, *, code: bool = False) -> str:
    """User-supplied text made inert for Streamlit's Markdown (the ONE escaping helper of the console).

    Every value that did not come from the page's own source (names, reasons, comments, users, cell
    values, branch and table names, check messages, error messages, query parameters) goes through
    ``md()`` before it reaches ``st.markdown/write/error/warning/success/info/caption``, a
    ``st.status``/``st.page_link``/``st.expander`` label or ``st.toast``. Every ASCII punctuation
    character is backslash-escaped, which CommonMark renders as the literal character: no link,
    image, emphasis, heading, list, table, raw HTML (``<img>``), entity (``&lt;``), Streamlit
    directive (``:red[...]``, ``:material/...:``) or LaTeX (``$...$``) can be formed. GFM's literal
    autolinks see through backslashes, so :func:`unlinked` first puts a word joiner inside every
    ``://``, ``www.`` and ``@``: a URL, a host or an e-mail address in user text renders as text,
    never as a link (no phishing through a shared review link). A line break becomes a Markdown hard break,
    never a new block; any other control character shows as its escape (``\\x1b``). ``code=True`` renders
    the text as an inline code span (a path, a SQL text) with a fence longer than any run of backticks
    inside, so it cannot be closed early.
    """
    # line breaks kept, every other control character (ESC, BEL, NUL...) shown as its escape (``\\x1b``)
    s = printable(_LINE_BREAK.sub("\n", "" if text is None else str(text)))
    if code:  # a code span is never autolinked: the text stays exactly as given
        s = _LINE_BREAK.sub(" ", s)
        longest = max((len(run) for run in re.findall(r"`+", s)), default=0)
        fence = "`" * (longest + 1)
        return f"{fence} {s} {fence}"
    escaped = "".join("\\" + ch if ch in _MD_PUNCT else ch for ch in unlinked(s))
    return _LINE_BREAK.sub("  \n", escaped)


def store_line(exc: BaseException) -> str | None:
    """A failure of the object store (down, refusing the keys, bucket missing) as the one line the CLI
    prints (:func:`wap_core.lake.errors.store_failure`: the endpoint named, no Java stack, no key); None
    when the store is not to blame."""
    return api.store_failure(exc)  # None also when the settings themselves are broken


def error_text(exc: BaseException) -> str:
    """An exception's message ready for the page: the store's one line when the object store failed, else
    the message; secrets masked, then escaped with :func:`md`."""
    return md(store_line(exc) or mask_secrets(str(exc)))


def show_error(exc: BaseException) -> None:
    """Show an error in the page: secrets masked, user text escaped (never ``st.error(str(exc))``)."""
    st.error(error_text(exc))


def guarded(action: Callable[[], T]) -> T | None:
    """Run a wap_core call; show WapError, or a failure of the object store, as a clear in-page error
    instead of a traceback."""
    try:
        return action()
    except WapError as exc:
        show_error(exc)
        return None
    except Exception as exc:
        if store_line(exc) is None:
            raise
        show_error(exc)
        return None


@contextmanager
def wap_errors() -> Iterator[None]:
    """Show WapError, or a failure of the object store (one line naming the endpoint), in the page."""
    try:
        yield
    except WapError as exc:
        show_error(exc)
    except Exception as exc:
        if store_line(exc) is None:
            raise
        show_error(exc)


# --------------------------------------------------------------------------- cached metadata (no Spark)
@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def table_infos() -> list[TableInfo]:
    return api.table_infos(_reads())


@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def table_names() -> list[str]:
    return [str(t) for t in api.table_names(_reads())]


@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def branches(table: str | None = None) -> list[BranchInfo]:
    tid = TableId.parse(table) if table else None
    return api.list_branches(_reads(), tid)


@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def batch_rows() -> list[BatchRow]:
    """Every open batch as one row (tables, worst status, rows added): the Branches page's batches."""
    return api.batch_rows(_reads())


@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def open_batch_names() -> list[str]:
    """The names of the open batches (Ingest's choice of a batch to add a table to)."""
    return [b.name for b in api.open_batches(_reads())]


@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def journal(table: str | None = None, action: str | None = None, limit: int = 500) -> list[JournalEntry]:
    return api.history(_reads(), table, action=action, limit=limit)


@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def audit_record(table: str | None = None, limit: int = 500) -> list[StoredAudit]:
    return api.audit_record(_reads(), table, limit=limit)


@st.cache_data(ttl=CACHE_TTL, show_spinner=False)
def timeline(table: str, ref: str = "main") -> list[TimelineSnapshot]:
    return api.snapshot_timeline(_reads(), TableId.parse(table), ref)


# --------------------------------------------------------------------------- rendering
def review_url(table: str, branch: str) -> str:
    return f"/review?table={table}&branch={branch}"


def batch_review_url(batch: str) -> str:
    """The Review of a batch that spans tables (``batch``: a validated name, safe in the URL)."""
    return f"/review?batch={batch}"


def status_badge(status: str) -> str:
    return f"{STATUS_ICON.get(status, '○')} {status.replace('_', ' ')}"


def review_links(batches: Sequence[BatchRow], branches: Sequence[BranchInfo]) -> None:
    """A link to the Review of each batch, then of each branch, with its status badge."""
    for b in batches:
        st.page_link(
            "pages/review.py",
            label=f"Batch {md(b.batch)} · {md(', '.join(b.tables))} — {md(status_badge(b.status.value))}",
            query_params={"batch": b.batch},
        )
    for r in branches:
        st.page_link(
            "pages/review.py",
            label=f"{md(r.table)} · {md(r.branch)} — {md(status_badge(r.status))}",
            query_params={"table": r.table, "branch": r.branch},
        )


def style_status(df: pd.DataFrame, column: str = "status") -> Any:
    """A Styler colouring the badge cells of ``column`` (green passed, red failed, ...)."""

    def color(value: Any) -> str:
        text = str(value)
        for status, hex_color in STATUS_COLOR.items():
            if text.endswith(status.replace("_", " ")):
                return f"color: {hex_color}; font-weight: 600"
        return ""

    return df.style.map(color, subset=[column]) if column in df.columns and len(df) else df


# One look for every grid: counts with thousands separators (as the metrics' ``f"{n:,}"``), NULL
# cells blank (never "None"), times as local text with the zone.
COUNT_FORMAT = "%,d"
NULL_TEXT = ""


def count_column(label: str, **kw: Any) -> ColumnConfig:
    """A grid column of counts (rows, records, files, snapshots): ``1,100,000``, sortable as a number."""
    return st.column_config.NumberColumn(label, format=COUNT_FORMAT, **kw)


def computed_counts(df: pd.DataFrame, table_columns: Sequence[str]) -> ColumnConfigs:
    """Grid columns for a SQL result: every numeric column the query computed (a ``count(*)``, a ``sum``:
    a name that is no column of the table) with thousands separators (``594,933,341``), as the metrics.
    The table's own columns show as stored (a ``year`` stays ``2013``)."""
    own = set(table_columns)
    config: ColumnConfigs = {}
    for c in df.columns:
        if c in own or _is_id_key(c) or pd.api.types.is_bool_dtype(df[c]):
            continue
        if pd.api.types.is_integer_dtype(df[c]):
            config[c] = count_column(str(c))
        elif pd.api.types.is_float_dtype(df[c]):
            config[c] = st.column_config.NumberColumn(str(c), format="localized")
    return config


def grid(data: Any, *, counts: tuple[str, ...] = (), **kw: Any) -> Any:
    """``st.dataframe`` with the console's defaults: NULL cells blank, no index, full width, and every
    datetime column of a DataFrame (a Styler's data is left alone) as local time with its zone. ``counts``:
    columns of counts, shown with thousands separators (1,008; never an id)."""
    if isinstance(data, pd.DataFrame):
        data = zoned_times(data)
    if counts:
        config = dict(kw.pop("column_config", None) or {})
        for c in counts:
            config.setdefault(c, st.column_config.NumberColumn(format="localized"))
        kw["column_config"] = config
    kw.setdefault("placeholder", NULL_TEXT)
    kw.setdefault("hide_index", True)
    kw.setdefault("width", "stretch")
    return st.dataframe(data, **kw)


def text_table(df: pd.DataFrame, *, nowrap: tuple[str, ...] = ()) -> None:
    """A small static table whose long texts wrap (shown whole, never cut off like a grid cell).

    ``st.table`` renders its cells as Markdown: every cell goes through :func:`md`; the ``nowrap``
    columns (times) stay on one line (:func:`unbroken`)."""
    shown = df.copy()
    for c in shown.columns:
        shown[c] = [unbroken(md(blank(v))) if c in nowrap else md(blank(v)) for v in shown[c]]
    st.table(shown, hide_index=True)


def unbroken(text: str) -> str:
    """``text`` that never breaks across lines: spaces made non-breaking, and a word joiner (invisible, no
    width) after each hyphen, where a browser would otherwise break a date (``2026-11-`` / ``26``)."""
    return text.replace(" ", "\u00a0").replace("-", "-" + WORD_JOINER)


def zoned_times(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` whose datetime columns read as local time with the zone (naive ones are UTC:
    Spark's session time zone); blank for NaT. Other columns untouched."""
    stamps = [c for c in df.columns if pd.api.types.is_datetime64_any_dtype(df[c])]
    if not stamps:
        return df
    out = df.copy()
    for c in stamps:
        out[c] = out[c].map(local_time).astype(object)
    return out


TICKS = 6  # about this many ticks on a time axis; Vega puts them on whole seconds, minutes, hours, days...
# A label format precise to the finest tick interval Vega may choose for a span (its step is at least
# about span / (2 * TICKS)), so no two ticks read the same: (span up to, in seconds, format).
_TICK_FORMATS = (
    (2 * TICKS, "%H:%M:%S.%L"),  # a step under a second
    (2 * TICKS * 60, "%H:%M:%S"),  # under a minute
    (2 * TICKS * 86400, "%b %d %H:%M"),  # under a day
    (2 * TICKS * 86400 * 30, "%b %d"),  # under a month
)


def time_axis(times: pd.Series, title: str) -> Any:
    """An Altair x axis for ``times`` (datetimes) whose tick labels are precise enough for the span:
    seconds for commits a few seconds or minutes apart, never one minute printed on every tick."""
    import altair as alt

    valid = times.dropna()
    span = (valid.max() - valid.min()).total_seconds() if len(valid) > 1 else 0.0
    fmt = next((f for limit, f in _TICK_FORMATS if span <= limit), "%b %Y")
    return alt.Axis(title=title, format=fmt, labelAngle=-30, labelOverlap=True, tickCount=TICKS)


# Bins of a count-over-time chart, fitted to the span of the data so there are several bars whatever it is:
# (span up to, in seconds; pandas unit; axis label format; the unit in words).
_BIN_UNITS = (
    (10 * 60, "10s", "%H:%M:%S", "10 seconds"),
    (3600, "1min", "%H:%M", "minute"),
    (6 * 3600, "10min", "%H:%M", "10 minutes"),
    (2 * 86400, "1h", "%b %d %H:%M", "hour"),
    (30 * 86400, "1D", "%b %d", "day"),
    (math.inf, "7D", "%b %d", "week"),
)
MAX_TIME_LABELS = 12  # at most this many labelled ticks (every k-th bin start beyond)


@dataclass(frozen=True)
class TimeBins:
    """Times put in bins of one unit: each time's bin ``starts`` and ``ends``, the axis ``domain`` (first
    start, last end), its ``ticks`` (bin starts, as Vega-Lite DateTime objects in UTC), label ``format``
    and ``label`` (the unit in words)."""

    starts: pd.Series
    ends: pd.Series
    domain: tuple[pd.Timestamp, pd.Timestamp]
    ticks: list[dict[str, int | bool]]
    format: str
    label: str


def time_bins(times: pd.Series) -> TimeBins:
    """Bins for ``times`` (UTC datetimes) of the unit fitted to their span (10 seconds for a few minutes of
    audits ... a week for months): a bar spans its bin, and each label names a different bin."""
    valid = times.dropna()
    span = (valid.max() - valid.min()).total_seconds() if len(valid) > 1 else 0.0
    _, unit, fmt, label = next(u for u in _BIN_UNITS if span <= u[0])
    step = pd.Timedelta(unit)
    starts = times.dt.floor(unit)
    first, last = starts.min(), starts.max() + step
    n = max(1, round((last - first) / step))
    every = math.ceil(n / MAX_TIME_LABELS)
    ticks = [_vega_datetime(first + i * step) for i in range(0, n + 1, every)]
    return TimeBins(starts, starts + step, (first, last), ticks, fmt, label)


def _vega_datetime(ts: pd.Timestamp) -> dict[str, int | bool]:
    """A UTC instant as a Vega-Lite DateTime object (what an axis' ``values`` takes on a time scale)."""
    u = ts.tz_convert("UTC")
    return {
        "utc": True,
        "year": u.year,
        "month": u.month,
        "date": u.day,
        "hours": u.hour,
        "minutes": u.minute,
        "seconds": u.second,
    }


def latest_table(infos: list[TableInfo], tables: list[str]) -> str | None:
    """Of ``tables``, the one whose main changed most recently (``last_updated`` of :func:`table_infos`)."""
    stamps = {i.table: to_datetime(pd.Series([i.last_updated]))[0] for i in infos}
    dated = [(stamps[t], t) for t in tables if t in stamps and not pd.isna(stamps[t])]
    return max(dated)[1] if dated else (tables[0] if tables else None)


def number_text(value: object) -> str:
    """A value (not a count) as the console shows it: a whole number without decimals (``1``, ``2400``,
    never ``1.0`` or ``2400.000000``), a fraction to at most 3 decimals (``1348.331``, trailing zeros
    dropped), no thousands separators (a value is no count: a year stays ``2013``); blank for none/NaN;
    anything else (a date, a text) as text."""
    if value is None or isinstance(value, bool):
        return blank(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "" if math.isnan(value) else str(value)
        if value.is_integer():
            return str(int(value))
        if abs(value) < 0.001:
            return f"{value:.3g}"
        return f"{value:.3f}".rstrip("0").rstrip(".")
    return str(value)


def mean_text(value: object) -> str:
    """A mean as the console shows it: always two decimals (``1348.33``, ``12.50``, ``3.00``), so the means of
    a profile read alike down their column; blank for none/NaN."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return blank(value)
    if not math.isfinite(value):
        return "" if math.isnan(value) else str(value)
    return f"{value:.2f}"


def human_bytes(n: int | float | None) -> str:
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return ""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(size) < 1024 or unit == "TB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{size:,.1f} TB"  # pragma: no cover


def short_time(iso: str | None) -> str:
    """A readable local time with its zone (``2026-11-22 06:06:04 CET``); blank for none."""
    return local_time(iso)


def local_time(value: object) -> str:
    """An ISO 8601 text or a datetime as the server's local time with the zone; "" for none/unparseable."""
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return ""
    try:
        ts = pd.Timestamp(value)
    except (ValueError, TypeError):
        return str(value)
    if ts is pd.NaT:
        return ""
    if ts.tzinfo is None:
        ts = ts.tz_localize("UTC")
    local: datetime = ts.to_pydatetime().astimezone()
    return local.strftime("%Y-%m-%d %H:%M:%S ") + (local.tzname() or local.strftime("%z"))


def id_text(value: object) -> str:
    """A 64-bit id as exact text (never through a float/JavaScript number); "" for none."""
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):  # should not happen: ids are ints; keep the digits we have
        return str(int(value))
    return str(value)


def blank(value: object) -> str:
    """Text of a value, blank for None/NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value)


def details_text(details: object) -> str:
    """A details mapping as ``key: value`` text joined by `` · `` (nested values compact)."""
    if not details:
        return ""
    if not isinstance(details, dict):
        return str(details)
    parts = []
    for k, v in details.items():
        if v is None or v in ("", [], {}):
            continue
        if isinstance(v, (list, tuple)):
            v = ", ".join(str(x) for x in v)
        elif isinstance(v, dict):
            v = ", ".join(f"{a}={b}" for a, b in v.items())
        parts.append(f"{k}: {v}")
    return " · ".join(parts)


ID_COLUMNS = (
    "snapshot_id",
    "parent_id",
    "snapshot_before",
    "snapshot_after",
    "head_snapshot_id",
    "fork_snapshot_id",
    "main_snapshot_id",
    "main_before",
    "main_after",
    "head",
    "old_head",
    "new_head",
)


def texts_for_ids(df: pd.DataFrame) -> pd.DataFrame:
    """Every 64-bit id column of ``df`` as exact text (st.dataframe and Vega would round them as numbers)."""
    for c in df.columns:
        if _is_id_key(c):
            df[c] = df[c].map(id_text).astype(object)
    return df


def times_for_display(df: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """Time columns as readable local text with the zone (full ISO stays in JSON and chart tooltips)."""
    for c in columns:
        if c in df.columns:
            df[c] = df[c].map(local_time).astype(object)
    return df


def _is_id_key(key: object) -> bool:
    return key in ID_COLUMNS or str(key).endswith("snapshot_id")


def frame(
    rows: Sequence[Mapping[str, Any] | DataclassInstance], columns: list[str] | None = None
) -> pd.DataFrame:
    """A DataFrame of ``rows`` (dicts, or the core's dataclasses in their JSON form: times as ISO text,
    enums as their values); 64-bit ids become exact text BEFORE pandas sees them (a None among ids
    would otherwise make the column float64 and round the ids)."""
    cells = [
        {k: (id_text(v) if _is_id_key(k) else v) for k, v in _row_json(r, columns).items()} for r in rows
    ]
    df = pd.DataFrame(cells)
    if columns is not None:
        for c in columns:
            if c not in df.columns:
                df[c] = None
        df = df[columns]
    return texts_for_ids(df)


def _row_json(row: Mapping[str, Any] | DataclassInstance, columns: list[str] | None) -> Mapping[str, Any]:
    """A row for :func:`frame`: a dict as it is, a dataclass as its JSON (only ``columns``, when given)."""
    if isinstance(row, Mapping):
        return row
    if columns is None:
        return to_jsonable(row)
    return {c: to_jsonable(getattr(row, c, None)) for c in columns}


def to_datetime(series: pd.Series) -> pd.Series:
    return pd.to_datetime(series, utc=True, errors="coerce", format="ISO8601")


def ensure_router() -> None:
    """Make sure app.py (the router) runs every page, even on a fresh server's first deep link.

    Streamlit still treats a folder named ``pages/`` as a v1 multipage app until ``st.navigation``
    has run once in the process: a first request to ``/review?...`` would then run
    ``pages/review.py`` alone (no sidebar, helper modules listed as pages). In that case the
    router is executed in place, in this same script run (so widget events are kept), and the
    direct run of the page stops once the router has rendered it.
    """
    from streamlit.runtime.pages_manager import PagesManager

    if not PagesManager.uses_pages_directory:
        return
    PagesManager.uses_pages_directory = False
    app = Path(__file__).resolve().parent.parent / "app.py"
    exec(compile(app.read_text(), str(app), "exec"), {"__name__": "__main__", "__file__": str(app)})
    st.stop()


def page_header(title: str, caption: str | None = None) -> None:
    ensure_router()
    st.title(title)
    if caption:
        st.caption(caption)
    show_flash()


def sanitize_filename(name: str) -> str:
    """A safe file name for an upload: basename only, [A-Za-z0-9._-], no leading dots (see wap_core.security.paths)."""
    return api.sanitize_filename(name)
