"""Errors as one line a person can act on: Spark's ``ERROR_CLASS: message`` and the object store's failures.

PySpark turns some JVM exceptions into its own (``AnalysisException``, ``SparkRuntimeException``...,
all ``CapturedException``) and leaves the rest as ``Py4JJavaError``, whose text starts with
"An error occurred while calling o2209.collectToPython". A failed task is the second kind: a
``SparkException`` "Job aborted due to stage failure" whose cause is the error of the row
(e.g. ``[DUPLICATED_MAP_KEY] Duplicate map key 1 was found...``). :func:`spark_error_line` walks the
JVM cause chain and reports the innermost error that has a Spark error class, else the root cause.

A failure of the object store (down or answering 503, refused credentials, missing bucket) or of an
Iceberg REST catalog is one line naming the endpoint (:func:`store_failure`): never a Java stack, never
a key. The CLI (wap_core.cli.runner) and the console's pages (pages/_common.py) both print it. A Spark error
that hides its cause (Iceberg reports a table whose metadata it could not read as ``TABLE_OR_VIEW_NOT_FOUND``
when the store died under it) is checked against the store itself (:func:`store_failure_or_probe`).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from wap_core.config import Settings, mask_secrets
from wap_core.exceptions import SparkJobError, one_line
from wap_core.lake.backends import store_of
from wap_core.lake.catalog import rest_endpoint
from wap_core.lake.s3 import bucket_exists, bucket_of, endpoint_label, filesystem

MAX_CHARS = 500
_CLASS_PREFIX = re.compile(r"^\[(?P<cls>[A-Z][A-Z0-9_]*(?:\.[A-Z][A-Z0-9_]*)*)\]\s*")
_EMBEDDED = re.compile(r"\[(?P<cls>[A-Z][A-Z0-9_]*(?:\.[A-Z][A-Z0-9_]*)*)\]\s*(?P<msg>[^\n]*)")
_PY4J_CALL = re.compile(r"An error occurred while calling \S+")


def _java_exception(exc: BaseException) -> Any | None:
    """The JVM throwable behind a PySpark or Py4J exception, if any."""
    origin = getattr(exc, "_origin", None)  # pyspark.errors CapturedException
    if origin is not None:
        return getattr(origin, "java_exception", origin)
    return getattr(exc, "java_exception", None)  # py4j.protocol.Py4JJavaError


def _first_line(text: str | None) -> str:
    lines = [ln.strip() for ln in str(text or "").splitlines() if ln.strip()]
    return lines[0] if lines else ""


def _split(message: str, error_class: str | None) -> tuple[str | None, str]:
    """``[CLASS] text`` -> (CLASS, text); a message without the prefix keeps ``error_class``."""
    m = _CLASS_PREFIX.match(message)
    if m:
        return m.group("cls"), message[m.end() :].strip()
    return error_class, message


def _chain(throwable: Any, limit: int = 32) -> list[Any]:
    out: list[Any] = []
    seen: set[int] = set()
    t = throwable
    while t is not None and len(out) < limit:
        try:
            key = int(t.hashCode())
        except Exception:  # noqa: BLE001 - a throwable whose hashCode fails: stop walking, keep what we have
            break
        if key in seen:
            break
        seen.add(key)
        out.append(t)
        try:
            t = t.getCause()
        except Exception:  # noqa: BLE001 - the JVM object went away: the chain ends here
            break
    return out


def _error_class(throwable: Any) -> str | None:
    try:
        value = throwable.getErrorClass()  # every org.apache.spark.SparkThrowable
    except Exception:  # noqa: BLE001 - not a SparkThrowable (no such method through Py4J)
        return None
    return str(value) if value else None


def _simple_name(throwable: Any) -> str:
    try:
        return str(throwable.getClass().getSimpleName())
    except Exception:  # noqa: BLE001 - a JVM object we cannot ask: name it generically
        return "Error"


def spark_error_parts(exc: BaseException) -> tuple[str | None, str]:
    """(Spark's error class or None, the first line of its message) for ``exc``; no Py4J object name."""
    throwable = _java_exception(exc)
    if throwable is not None:
        chain = _chain(throwable)
        classified = [(t, c) for t in chain if (c := _error_class(t)) and not c.startswith("_LEGACY_ERROR")]
        if classified:
            inner, inner_class = classified[-1]
            return _split(_first_line(inner.getMessage()), inner_class)
        for t in reversed(chain):  # the root cause first
            msg = _first_line(t.getMessage())
            if msg:
                prefixed, text = _split(msg, None)
                return (prefixed, text) if prefixed else (None, f"{_simple_name(t)}: {text}")
        if chain:
            return None, _simple_name(chain[-1])
    text = _first_line(getattr(exc, "desc", None) or str(exc))
    if not type(exc).__module__.startswith(("pyspark", "py4j")):  # not Spark's: its first line as it is
        return None, text or type(exc).__name__
    getter = getattr(exc, "getErrorClass", None)
    cls: str | None = None
    if callable(getter):
        try:
            cls = getter()
        except Exception:  # noqa: BLE001 - the JVM is gone: the text alone
            cls = None
    m = _EMBEDDED.search(str(exc)) if not cls else None
    if m:  # "Job aborted ... : org.apache.spark.SparkRuntimeException: [CLASS] message"
        return m.group("cls"), m.group("msg").strip()
    text = _PY4J_CALL.sub("", text).strip(" .:") or type(exc).__name__
    return _split(text, str(cls) if cls else None)


def _line(cls: str | None, text: str) -> str:
    return one_line(mask_secrets(f"{cls}: {text}" if cls else text))[:MAX_CHARS]


def is_spark_error(exc: BaseException) -> bool:
    """True for a PySpark or Py4J error (a failure inside Spark's JVM)."""
    return _java_exception(exc) is not None or type(exc).__module__.startswith(("pyspark", "py4j"))


def spark_error_line(exc: BaseException) -> str:
    """``ERROR_CLASS: message`` (or the message alone), one line, secrets masked, at most 500 characters."""
    return _line(*spark_error_parts(exc))


def spark_job_error(exc: BaseException, prefix: str = "SQL error") -> SparkJobError:
    """The domain error for a Spark failure: ``<prefix>: ERROR_CLASS: message`` in one line."""
    cls, text = spark_error_parts(exc)
    return SparkJobError(f"{prefix}: {_line(cls, text)}", error_class=cls)


# --------------------------------------------------------------------------- the object store
# Causes worth a message, from the Java (S3A/AWS SDK), PyArrow, PyIceberg REST texts; the first that matches wins.
_MISSING = re.compile(
    r"(?i)NoSuchBucket|bucket does not exist|specified bucket does not exist|table bucket (?P<tb>[\w.-]+) not found"
)
_DENIED = re.compile(
    r"(?i)InvalidAccessKeyId|SignatureDoesNotMatch|AccessDenied|403 Forbidden|Status Code: 403|HTTP status 403|"
    r"ACCESS_DENIED|credentials were refused|No AWS Credentials|NotAuthorized|UnauthorizedError|OAuthError|"
    r"invalid_client|Bearer token is invalid"
)
_DOWN = re.compile(
    r"(?i)Connection refused|Unable to execute HTTP request|connect timed out|ConnectException|"
    r"NETWORK_CONNECTION|Couldn't connect|Could not connect|curlCode: 7|UnknownHostException|"
    r"Failed to connect|connection reset|ConnectTimeoutException|503 Service Unavailable|Status Code: 503|"
    r"HTTP status 503|SlowDown|ServiceUnavailable|Max retries exceeded"
)
_BUCKET = re.compile(r"s3[an]?://([^/\s'\"]+)|in bucket '([^']+)'")


def store_error(settings: Settings, text: str) -> str | None:
    """One line for a failure of the object store (or the REST catalog) found in ``text`` (an exception's
    text, Java stack included), naming the endpoint; None when ``text`` is not such a failure."""
    rest = rest_endpoint(settings)
    where = f"object store {endpoint_label(settings)}"
    if rest and (
        urlsplit(rest).netloc in text or re.search(r"(?i)NotAuthorized|OAuth|Bearer|table bucket", text)
    ):
        where = f"Iceberg REST catalog {rest}"
    missing = _MISSING.search(text)
    if missing:
        m = _BUCKET.search(text)
        bucket = (
            missing.group("tb") or (m and (m.group(1) or m.group(2))) or bucket_of(settings.warehouse_uri)
        )
        line = f"bucket {bucket!r} does not exist"
    elif _DENIED.search(text):
        fix = (
            "credential= in WAP_CATALOG_PROPERTIES"
            if where.startswith("Iceberg")
            else "WAP_S3_ACCESS_KEY / WAP_S3_SECRET_KEY"
        )
        line = f"access denied (check {fix})"
    elif _DOWN.search(text):
        line = "unreachable or unavailable"
    else:
        return None
    return mask_secrets(f"{where}: {line}")


def store_failure(exc: BaseException, settings: Settings) -> str | None:
    """:func:`store_error` for an exception (PyArrow's, PyIceberg's, or a Py4J error carrying the Java
    cause chain), following ``__cause__``/``__context__``; None when the store is not to blame or the
    settings use no object store."""
    if not store_of(settings).remote:
        return None
    seen: set[int] = set()
    e: BaseException | None = exc
    texts: list[str] = []
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        texts.append(f"{type(e).__name__}: {e}")
        e = e.__cause__ or e.__context__
    return store_error(settings, "\n".join(texts))


def _spark_in_chain(exc: BaseException) -> bool:
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if is_spark_error(e):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def store_unreachable(settings: Settings) -> str | None:
    """The store's one line when it does not answer now (one look at the warehouse's bucket), else None.
    Only "unreachable or unavailable" counts: a refusal of this look (an S3 Tables bucket is no plain bucket)
    proves nothing about the failure being explained."""
    try:
        bucket_exists(filesystem(settings), bucket_of(settings.warehouse_uri))
    except OSError as exc:
        line = store_failure(exc, settings)
        return line if line and line.endswith(": unreachable or unavailable") else None
    return None


def store_failure_or_probe(exc: BaseException, settings: Settings) -> str | None:
    """:func:`store_failure`; else, for a failure inside Spark on an object store (whose text may not name the
    store: the table "not found" once its metadata could not be read), :func:`store_unreachable`."""
    line = store_failure(exc, settings)
    if line is None and store_of(settings).remote and _spark_in_chain(exc):
        return store_unreachable(settings)
    return line
