"""S3 and S3-compatible object storage: one setting family for Spark (S3A) and PyIceberg (PyArrow).

``WAP_S3_ENDPOINT``, ``WAP_S3_ACCESS_KEY``, ``WAP_S3_SECRET_KEY``, ``WAP_S3_REGION`` and
``WAP_S3_PATH_STYLE`` become both Hadoop's ``fs.s3a.*`` Spark conf (:func:`spark_conf`) and
PyIceberg's ``s3.*`` FileIO properties (:func:`pyiceberg_properties`), so nobody writes the two
dialects by hand. The S3A client jars (``hadoop-aws`` and the AWS SDK bundle matching PySpark's
Hadoop 3.3.4) come from ``make setup-s3`` into ``<venv>/share/wap-jars`` (:func:`s3a_jars`); Spark
gets them whenever the warehouse or an ingest root is an ``s3a://``/``s3://`` URL.

Errors of the store (down, refused credentials, missing bucket) reach the user as one line naming
the endpoint (:func:`wap_core.lake.errors.store_failure`): never a Java stack, never a key.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from wap_core.config import Settings, StoreUrl, env_name
from wap_core.exceptions import EnvironmentSetupError

if TYPE_CHECKING:
    from pyarrow.fs import S3FileSystem

S3_SCHEMES = ("s3a://", "s3://", "s3n://")
HADOOP_AWS_JAR = "hadoop-aws-3.3.1.jar"
AWS_SDK_JAR = "aws-java-sdk-bundle-1.11.901.jar"
JARS_ENV = env_name("s3a_jars_dir")  # another folder holding the two jars (default <venv>/share/wap-jars)


def is_s3_url(value: str | os.PathLike[str]) -> bool:
    """True for ``s3a://``, ``s3://`` and ``s3n://`` URLs."""
    return str(value).startswith(S3_SCHEMES)


def uses_s3(settings: Settings) -> bool:
    """True when the warehouse, an ingest root or the S3 settings point at object storage."""
    return (
        is_s3_url(settings.warehouse_uri)
        or any(is_s3_url(str(r)) for r in settings.ingest_roots)
        or settings.s3_endpoint is not None
        or settings.s3_access_key is not None
    )


def jars_dir(settings: Settings) -> Path:
    """Where the S3A jars are: the ``s3a_jars_dir`` setting (``WAP_S3A_JARS_DIR``) or ``<venv>/share/wap-jars``
    (where ``make setup-s3`` puts them)."""
    return settings.s3a_jars_dir or Path(sys.prefix) / "share" / "wap-jars"


def s3a_jars(settings: Settings) -> list[str]:
    """The S3A client jars for Spark; EnvironmentSetupError naming the fix when they are missing."""
    folder = jars_dir(settings)
    jars = [folder / HADOOP_AWS_JAR, folder / AWS_SDK_JAR]
    missing = [j.name for j in jars if not j.is_file()]
    if missing:
        raise EnvironmentSetupError(
            f"the S3A jars are missing from {folder} ({', '.join(missing)}): run 'make setup-s3' "
            f"(it extracts them from PyPI's sagemaker-pyspark==1.4.5), or set {JARS_ENV} to a folder holding them"
        )
    return [str(j) for j in jars]


def path_style(settings: Settings) -> bool:
    """Path-style addressing (``endpoint/bucket/key``): the setting, else True with a custom endpoint."""
    if settings.s3_path_style is not None:
        return settings.s3_path_style
    return settings.s3_endpoint is not None


def spark_conf(settings: Settings, *, per_bucket_only: bool = False) -> dict[str, str]:
    """Hadoop S3A conf for Spark (``spark.hadoop.fs.s3a.*``) from the S3 settings; ``s3://`` is S3A too.

    The same values again per bucket for the warehouse's bucket (``fs.s3a.bucket.<bucket>.*``), so
    lakehouses on different stores can share one Spark session (``per_bucket_only``: just those, for a
    lakehouse registered on a running session). Failures come fast (few retries, short timeouts): a
    store that is down is reported in seconds, not after Hadoop's default minutes of retrying.
    """
    base = _s3a_conf(settings)
    conf: dict[str, str] = {}
    if not per_bucket_only:
        conf["spark.hadoop.fs.s3.impl"] = "org.apache.hadoop.fs.s3a.S3AFileSystem"
        conf["spark.hadoop.fs.s3n.impl"] = "org.apache.hadoop.fs.s3a.S3AFileSystem"
        conf.update({f"spark.hadoop.fs.s3a.{k}": v for k, v in base.items()})
    if is_s3_url(settings.warehouse_uri):
        bucket = bucket_of(settings.warehouse_uri)
        conf.update({f"spark.hadoop.fs.s3a.bucket.{bucket}.{k}": v for k, v in base.items()})
    return conf


def _s3a_conf(settings: Settings) -> dict[str, str]:
    conf = {
        "path.style.access": str(path_style(settings)).lower(),
        "endpoint.region": settings.s3_region,
        "attempts.maximum": "2",
        "retry.limit": "2",
        "retry.interval": "200ms",
        "retry.throttle.limit": "3",
        "connection.establish.timeout": "5000",
        "connection.timeout": "30000",
        "bucket.probe": "0",
        "change.detection.version.required": "false",
    }
    if settings.s3_endpoint:
        conf["endpoint"] = settings.s3_endpoint
        conf["connection.ssl.enabled"] = str(settings.s3_endpoint.startswith("https")).lower()
    if settings.s3_access_key and settings.s3_secret_key:
        conf["aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        conf["access.key"] = settings.s3_access_key
        conf["secret.key"] = settings.s3_secret_key
    return conf


def pyiceberg_properties(settings: Settings) -> dict[str, str]:
    """PyIceberg's FileIO properties (``s3.*``, PyArrow's S3 filesystem) from the same settings."""
    props = {
        "s3.region": settings.s3_region,
        "s3.force-virtual-addressing": str(not path_style(settings)).lower(),
        "s3.connect-timeout": "5",
        "s3.request-timeout": "30",
    }
    if settings.s3_endpoint:
        props["s3.endpoint"] = settings.s3_endpoint
    if settings.s3_access_key and settings.s3_secret_key:
        props["s3.access-key-id"] = settings.s3_access_key
        props["s3.secret-access-key"] = settings.s3_secret_key
    return props


def filesystem(settings: Settings) -> S3FileSystem:
    """PyArrow's S3 client on the same settings (endpoint, keys, region, addressing), failing fast like
    :func:`spark_conf`: ingest sources and roots on the object store are listed and read with it."""
    from pyarrow import fs

    options: dict[str, object] = {}
    if settings.s3_endpoint:
        parts = urlsplit(settings.s3_endpoint)
        options["endpoint_override"] = parts.netloc + parts.path.rstrip("/")
        options["scheme"] = parts.scheme or "https"
    if settings.s3_access_key and settings.s3_secret_key:
        options["access_key"] = settings.s3_access_key
        options["secret_key"] = settings.s3_secret_key
    return fs.S3FileSystem(
        region=settings.s3_region,
        force_virtual_addressing=not path_style(settings),
        connect_timeout=5,
        request_timeout=30,
        retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=2),
        **options,
    )


def bucket_exists(client: S3FileSystem, bucket: str) -> bool:
    """True when ``bucket`` exists (OSError when the store cannot be asked)."""
    from pyarrow import fs

    return bool(client.get_file_info(bucket).type != fs.FileType.NotFound)


def object_size(client: S3FileSystem, url: StoreUrl) -> int | None:
    """The size of the object at ``url``; None when there is none (a missing key or a "folder")."""
    from pyarrow import fs

    info = client.get_file_info(url.path)
    return int(info.size or 0) if info.type == fs.FileType.File else None


def list_objects(client: S3FileSystem, prefix: StoreUrl) -> list[str]:
    """The keys of every object at or under ``prefix`` (``bucket/key/...``), sorted; none for a missing prefix."""
    from pyarrow import fs

    selector = fs.FileSelector(prefix.path, recursive=True, allow_not_found=True)
    infos = client.get_file_info(selector)
    cut = len(prefix.bucket) + 1
    return sorted(i.path[cut:] for i in infos if i.type == fs.FileType.File)


def download(client: S3FileSystem, url: StoreUrl, target: Path, chunk: int = 8 * 1024 * 1024) -> int:
    """Copy the object at ``url`` into ``target`` (created exclusively); returns the bytes copied."""
    copied = 0
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o640)
    with os.fdopen(fd, "wb") as out, client.open_input_stream(url.path) as inp:
        while True:
            data = inp.read(chunk)
            if not data:
                return copied
            out.write(data)
            copied += len(data)


def endpoint_label(settings: Settings) -> str:
    """The store as users name it: the endpoint, or AWS S3 in the region."""
    return settings.s3_endpoint or f"AWS S3 ({settings.s3_region})"


def bucket_of(url: str) -> str:
    """The bucket of an ``s3a://bucket/key`` URL."""
    return urlsplit(url).netloc
