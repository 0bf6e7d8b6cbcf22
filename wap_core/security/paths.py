"""Where server-side sources may be read from: the allowed ingest roots and per-batch upload folders.

A confined ingest (the console: :attr:`SourcePolicy.CONFINED`, the default of
:func:`wap_core.workflow.ingest.ingest`) reads only files under the allowed roots: the configured
``WAP_INGEST_ROOTS`` (``:``-separated, default ``$WAP_HOME/landing``) and the uploads root
``$WAP_HOME/uploads``. Every path is resolved through symlinks (``..`` and symlinks pointing out
are refused); a glob's folder must lie under a root and each of its matches is checked again.
The CLI passes :attr:`SourcePolicy.ANY`: whoever runs it already holds the catalog's credentials,
so it reads any path its OS user can read.

A root may also be an object-store prefix (``s3a://bucket/landing``) and a source an ``s3a://`` or
``s3://`` URL (the same object either way). Such a URL is confined on its structure, never by text
matching: the scheme is s3 or s3a, the bucket a valid bucket name equal to a root's, the key made of
plain segments (no ``..``, ``.``, ``//``, percent-encoding) under the root's prefix at a ``/``
boundary (``landing`` never allows ``landing-evil/x``). A glob is listed from the store under its
fixed prefix and every match is checked again (a key may hold ``:``; one the structure refuses fails
the glob naming that key). The objects are copied into a fresh upload folder (:func:`fetch_url_sources`),
so the batch reads exactly what was confined, and the URLs stay the batch's provenance. A local file
whose path holds ``:`` is linked there under a sanitized name the same way (:func:`hadoop_readable`).

A URL's user info (``s3a://KEY:SECRET@bucket``) is refused, and never echoed nor journaled:
:func:`wap_core.config.mask_secrets` masks an object-store URL's user info whole (``s3a://***@bucket``).
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import Enum
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING

from wap_core.config import GLOB_CHARS, Settings, StoreUrl, is_url, mask_secrets, parse_store_url
from wap_core.exceptions import PathNotAllowedError, SourceError, ValidationError, one_line
from wap_core.lake import s3
from wap_core.lake.backends import store_of
from wap_core.lake.errors import store_failure

if TYPE_CHECKING:
    from pyarrow.fs import S3FileSystem

log = logging.getLogger(__name__)
_MAGIC = frozenset("*?[")


class SourcePolicy(str, Enum):
    """Which server-side paths an ingest may read."""

    CONFINED = "confined"  # only under the allowed ingest roots (the console; the safe default)
    ANY = "any"  # any path the OS user can read (the CLI and trusted in-process callers such as the demo)


def uploads_root(settings: Settings) -> Path:
    """``$WAP_HOME/uploads``: the console's uploads, one folder per batch; always an allowed root."""
    return settings.home / "uploads"


def allowed_roots(settings: Settings) -> tuple[Path, ...]:
    """The roots a confined ingest may read under, resolved through symlinks: the configured ingest
    roots and the uploads root. The default landing folder (``$WAP_HOME/landing``) is created on first
    use; a configured root is never created (a typo must not become an empty allowed folder) and is
    left out while it does not exist."""
    if not settings.ingest_roots:
        (settings.home / "landing").mkdir(parents=True, exist_ok=True)
    uploads_root(settings).mkdir(parents=True, exist_ok=True)
    roots: list[Path] = []
    for root in (*settings.ingest_root_paths, uploads_root(settings)):
        try:
            resolved = root.expanduser().resolve(strict=True)
        except OSError:
            log.warning("ingest root %s does not exist; it allows nothing until it is created", root)
            continue
        if resolved.is_dir() and resolved not in roots:
            roots.append(resolved)
    return tuple(roots)


def describe_roots(settings: Settings) -> str:
    """The allowed roots as one line, for messages and the Ingest page."""
    return ", ".join(
        str(r) for r in (*settings.ingest_root_paths, *settings.ingest_root_urls, uploads_root(settings))
    )


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == r or path.is_relative_to(r) for r in roots)


def _refuse(shown: str, roots: Sequence[Path]) -> PathNotAllowedError:
    where = ", ".join(str(r) for r in roots) or "none configured"
    return PathNotAllowedError(
        f"source {shown!r} is outside the allowed ingest roots ({where}); "
        "put the file under one of them, upload it, or ask an admin to add its folder to WAP_INGEST_ROOTS"
    )


def confine(path: str | Path, roots: Sequence[Path]) -> Path:
    """The real path of ``path`` (symlinks resolved) if it lies under one of ``roots`` (resolved).

    A path outside is refused whether or not it exists, so a refusal never tells whether a file
    outside the roots exists; a path inside that does not exist is a SourceError.
    """
    shown = str(path)
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = Path.cwd() / p
    try:
        real = p.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, unreadable folder, or a symlink loop
        try:
            lexical = p.resolve(strict=False)
        except (OSError, RuntimeError):
            raise _refuse(shown, roots) from None
        if _inside(lexical, roots):
            raise SourceError(f"source {shown} does not exist") from None
        raise _refuse(shown, roots) from None
    if not _inside(real, roots):
        raise _refuse(shown, roots)
    return real


def _glob_base(pattern: str) -> Path:
    """The folder part of a glob before its first wildcard component (``/in/2013/*.csv`` -> ``/in/2013``)."""
    p = Path(pattern).expanduser()
    base: list[str] = []
    for part in p.parts:
        if any(ch in part for ch in _MAGIC):
            break
        base.append(part)
    out = Path(*base) if base else Path(".")
    return out if out.is_absolute() else Path.cwd() / out


def expand_confined(pattern: str, roots: Sequence[Path]) -> list[Path]:
    """Expand a glob under the roots: its folder must lie under a root and every match is confined.

    The pattern is normalized first (``in/*/../../x`` is ``x``), so ``..`` after a wildcard cannot
    walk out of the roots before the folder is checked.
    """
    shown = pattern
    pattern = os.path.normpath(os.path.expanduser(pattern))
    base = _glob_base(pattern)
    try:
        base_real = base.resolve(strict=False)
    except (OSError, RuntimeError):
        raise _refuse(shown, roots) from None
    if not _inside(base_real, roots):  # checked before expanding: no hint whether files outside exist
        raise _refuse(shown, roots)
    matched = sorted(glob.glob(pattern))
    if not matched:
        raise SourceError(f"source pattern {shown!r} matches no file")
    return [confine(m, roots) for m in matched]


# --------------------------------------------------------------------------- object-store sources
def root_problem(settings: Settings, root: StoreUrl) -> str | None:
    """Why an object-store ingest root cannot be read (its bucket missing, the store down, the keys
    refused), or None; :meth:`Settings.check_configured_paths` names the root with it."""
    if not store_of(settings).remote:  # pragma: no cover - an s3a:// root makes the store S3
        return "needs an object store (WAP_S3_ENDPOINT / WAP_S3_ACCESS_KEY / WAP_S3_SECRET_KEY)"
    try:
        client = s3.filesystem(settings)
        if not s3.bucket_exists(client, root.bucket):
            return f"names bucket {root.bucket!r}, which does not exist on {s3.endpoint_label(settings)}"
        if root.key:  # one cheap look at the prefix (never a listing of everything under it)
            s3.object_size(client, root)
    except OSError as exc:
        return f"cannot be read: {_store_line(exc, settings)}"
    return None


def _store_line(exc: BaseException, settings: Settings) -> str:
    """An object-store failure as one line naming the endpoint (or PyArrow's first line), masked."""
    line = store_failure(exc, settings)
    if line is None:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        line = f"object store {s3.endpoint_label(settings)}: {first}"
    return one_line(mask_secrets(line))[:500]


def _refuse_url(shown: str, settings: Settings, why: str | None = None) -> PathNotAllowedError:
    where = describe_roots(settings)
    return PathNotAllowedError(
        f"source {mask_secrets(shown)!r} is outside the allowed ingest roots ({where})"
        + (f": {why}" if why else "")
        + "; put the file under one of them, upload it, or ask an admin to add its prefix to WAP_INGEST_ROOTS"
    )


def _parse(text: str, settings: Settings, confined: bool, *, pattern: bool) -> StoreUrl:
    """The URL checked on its structure; refused (confined) or invalid (any) when it is not plain."""
    try:
        return parse_store_url(text, pattern=pattern)
    except ValidationError as exc:
        if confined:
            raise _refuse_url(text, settings, str(exc).split(": ", 1)[-1]) from None
        raise SourceError(f"source {exc}") from None


def _confined_url(text: str, settings: Settings, confined: bool, *, pattern: bool = False) -> StoreUrl:
    """:func:`_parse`, then (confined) the URL (a pattern: its fixed prefix) must lie under an object-store root."""
    url = _parse(text, settings, confined, pattern=pattern)
    if confined:
        fixed = _fixed_prefix(url) if pattern else url
        if not any(fixed.is_under(root) for root in settings.ingest_root_urls):
            raise _refuse_url(text, settings)
    return url


def _fixed_prefix(url: StoreUrl) -> StoreUrl:
    """The key's segments before the first one holding a wildcard (``in/2013/*.csv`` -> ``in/2013``)."""
    parts = url.key.split("/")
    cut = next(i for i, part in enumerate(parts) if any(ch in GLOB_CHARS for ch in part))
    return StoreUrl(url.bucket, "/".join(parts[:cut]))


def _glob_match(pattern: Sequence[str], key: str) -> bool:
    """Glob semantics per ``/`` segment, as :func:`glob.glob` (a wildcard never crosses ``/``, nor
    matches a leading ``.`` unless the pattern segment starts with one)."""
    parts = key.split("/")
    return len(parts) == len(pattern) and all(
        fnmatchcase(part, pat) and (not part.startswith(".") or pat.startswith("."))
        for part, pat in zip(parts, pattern, strict=True)
    )


def _objects(text: str, settings: Settings, confined: bool, client: S3FileSystem) -> list[StoreUrl]:
    """The objects a URL source names: the URL itself, or a glob's matches (each confined again)."""
    pattern = any(ch in GLOB_CHARS for ch in text.partition("://")[2])
    url = _confined_url(text, settings, confined, pattern=pattern)
    if not pattern:
        return [url]
    wanted = url.key.split("/")
    matches = [key for key in s3.list_objects(client, _fixed_prefix(url)) if _glob_match(wanted, key)]
    if not matches:
        raise SourceError(f"source pattern {mask_secrets(text)!r} matches no object")
    return [_match(text, url.bucket, key, settings, confined) for key in matches]


def _match(text: str, bucket: str, key: str, settings: Settings, confined: bool) -> StoreUrl:
    """One object a glob listed, checked again on its structure and (confined) under a root. A key the
    structure refuses (``%``, ``#``, a wildcard...) fails the glob naming that key, never as "outside the
    roots": the glob's prefix was confined before the listing."""
    try:
        match = parse_store_url(f"s3a://{bucket}/{key}")
    except ValidationError as exc:
        raise SourceError(
            f"source pattern {mask_secrets(text)!r} matches an object that cannot be read as a source: {exc}"
        ) from None
    if confined and not any(match.is_under(root) for root in settings.ingest_root_urls):
        raise _refuse_url(str(match), settings)
    return match


def fetch_url_sources(
    settings: Settings, sources: Sequence[str], policy: SourcePolicy
) -> tuple[list[str], dict[str, str]]:
    """``sources`` with each object-store URL (or URL glob) replaced by local copies of its objects, in one
    fresh upload folder, and {copy's real path: the object's canonical ``s3a://`` URL} (the provenance).

    Confined: a URL must lie under an object-store root (structurally, see the module). A URL needs
    an object store to be configured; any other scheme is refused. Local sources pass through unchanged.
    """
    if not any(is_url(src) for src in sources):
        return list(sources), {}
    confined = policy is not SourcePolicy.ANY
    for src in sources:  # every URL checked on its structure (and confined) before the store is asked
        if is_url(src):
            _confined_url(src, settings, confined, pattern=any(ch in GLOB_CHARS for ch in src))
    if not store_of(settings).remote:
        shown = next(mask_secrets(src) for src in sources if is_url(src))
        raise SourceError(
            f"source {shown!r} is an object-store URL, but no object store is configured "
            "(WAP_S3_ENDPOINT / WAP_S3_ACCESS_KEY / WAP_S3_SECRET_KEY, or an s3a:// WAP_WAREHOUSE)"
        )
    out: list[str] = []
    origin: dict[str, str] = {}
    folder: Path | None = None
    for src in sources:
        if not is_url(src):
            out.append(src)
            continue
        try:
            client = s3.filesystem(settings)
            for url in _objects(src, settings, confined, client):
                folder = folder or new_upload_dir(settings)
                local = _copy(client, url, folder / str(len(origin)))
                origin[str(local.resolve())] = str(url)
                out.append(str(local))
        except OSError as exc:
            raise SourceError(f"source {mask_secrets(src)!r}: {_store_line(exc, settings)}") from exc
    return out, origin


def hadoop_readable(
    settings: Settings, files: Sequence[str], origin: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """``files`` with each one whose path holds a ``:`` (legal in a file name, but Hadoop's ``Path`` reads
    ``a:b.csv`` as scheme ``a``) replaced by a hard link (a copy across file systems) under a sanitized name in
    one fresh upload folder, and ``origin`` extended to map it back to the file: the batch's provenance."""
    out: list[str] = []
    shown = dict(origin)
    folder: Path | None = None
    for f in files:
        if ":" not in f:
            out.append(f)
            continue
        folder = folder or new_upload_dir(settings)
        into = folder / str(len(out))
        into.mkdir()
        target = into / sanitize_filename(Path(f).name)
        try:
            os.link(f, target)
        except OSError:  # another file system, or a file the kernel will not link for us: a copy
            shutil.copyfile(f, target)
        shown[str(target)] = shown.get(f, f)
        out.append(str(target))
    return out, shown


def _copy(client: S3FileSystem, url: StoreUrl, into: Path) -> Path:
    """Copy one object into ``into/<its name>``: SourceError when there is no object or it is empty."""
    size = s3.object_size(client, url)
    if size is None:
        raise SourceError(f"source {url} does not exist (no object at that key)")
    if size == 0:
        raise SourceError(f"source {url} is empty")
    into.mkdir(parents=True)
    target = into / sanitize_filename(url.key.rsplit("/", 1)[-1])
    s3.download(client, url, target)
    return target


def sanitize_filename(name: str) -> str:
    """A safe file name for an upload: basename only, [A-Za-z0-9._-], no leading dots, at most 200 characters."""
    base = Path(name.replace("\\", "/")).name
    clean = "".join(ch if (ch.isascii() and ch.isalnum()) or ch in "._-" else "_" for ch in base).lstrip(".")
    return clean[:200] or "upload"


def new_upload_dir(settings: Settings) -> Path:
    """A fresh folder for one uploaded batch: ``$WAP_HOME/uploads/<UTC timestamp>_<uuid>`` (created)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S_%fZ")
    folder = uploads_root(settings) / f"{stamp}_{uuid.uuid4().hex}"
    folder.mkdir(parents=True, exist_ok=False)
    return folder


def save_upload(settings: Settings, filename: str, data: bytes) -> Path:
    """Write an uploaded file into its own new batch folder and return its path.

    Two uploads of the same name never overwrite each other: each goes to a new folder, and the
    file is created exclusively (``O_EXCL``), never through a pre-existing file or symlink.
    """
    target = new_upload_dir(settings) / sanitize_filename(filename)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o640)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return target
