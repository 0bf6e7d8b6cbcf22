"""S3 and S3-compatible object storage: one setting family for Spark (S3A) and PyIceberg (PyArrow).

``WAP_S3_ENDPOINT``, ``WAP_S3_ACCESS_KEY``, ``WAP_S3_SECRET_KEY``, ``WAP_S3_REGION`` and
``WAP_S3_PATH_STYLE`` become both Hadoop's ``fs.s3a.*`` Spark conf (:func:`spark_conf`) and
PyIceberg's ``s3.*`` FileIO properties (:func:`pyiceberg_properties`), so nobody writes the two
dialects by hand. The S3A client jars (``hadoop-aws`` and the AWS SDK bundle matching PySpark's
Hadoop 3.3.4) come from ``make setup-s3`` into ``<venv>/share/wap-jars`` (:func:`s3a_jars`); Spark
gets them whenever the warehouse or an ingest root is an ``s3a://``/``s3://`` URL.

Errors of the store (down, refused credentials, missing bucket) reach the user as one line naming
the endpoint (:func:`store_error`): never a Java stack, never a key.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from urllib.parse import urlsplit

from wap_core.config import Settings, mask_secrets
from wap_core.exceptions import EnvironmentSetupError

S3_SCHEMES = ("s3a://", "s3://", "s3n://")
HADOOP_AWS_JAR = "hadoop-aws-3.3.1.jar"
AWS_SDK_JAR = "aws-java-sdk-bundle-1.11.901.jar"
JARS_ENV = "WAP_S3A_JARS_DIR"  # another folder holding the two jars (default <venv>/share/wap-jars)


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


def jars_dir() -> Path:
    """Where ``make setup-s3`` puts the S3A jars: ``$WAP_S3A_JARS_DIR`` or ``<venv>/share/wap-jars``."""
    return Path(os.environ.get(JARS_ENV) or Path(sys.prefix) / "share" / "wap-jars")


def s3a_jars() -> list[str]:
    """The S3A client jars for Spark; EnvironmentSetupError naming the fix when they are missing."""
    folder = jars_dir()
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


def spark_conf(settings: Settings) -> dict[str, str]:
    """Hadoop S3A conf for Spark (``spark.hadoop.fs.s3a.*``) from the S3 settings; ``s3://`` is S3A too.

    Failures come fast (few retries, short timeouts): a store that is down is reported in seconds,
    not after Hadoop's default minutes of retrying.
    """
    h = "spark.hadoop.fs.s3a."
    conf = {
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3n.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        h + "path.style.access": str(path_style(settings)).lower(),
        h + "endpoint.region": settings.s3_region,
        h + "attempts.maximum": "2",
        h + "retry.limit": "2",
        h + "retry.interval": "200ms",
        h + "retry.throttle.limit": "3",
        h + "connection.establish.timeout": "5000",
        h + "connection.timeout": "30000",
        h + "bucket.probe": "0",
        h + "change.detection.version.required": "false",
    }
    if settings.s3_endpoint:
        conf[h + "endpoint"] = settings.s3_endpoint
        conf[h + "connection.ssl.enabled"] = str(settings.s3_endpoint.startswith("https")).lower()
    if settings.s3_access_key and settings.s3_secret_key:
        conf[h + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        conf[h + "access.key"] = settings.s3_access_key
        conf[h + "secret.key"] = settings.s3_secret_key
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


def endpoint_label(settings: Settings) -> str:
    """The store as users name it: the endpoint, or AWS S3 in the region."""
    return settings.s3_endpoint or f"AWS S3 ({settings.s3_region})"


# Causes worth a message, from the Java (S3A/AWS SDK) and PyArrow texts; the first that matches wins.
_CAUSES = (
    (
        re.compile(r"(?i)NoSuchBucket|bucket does not exist|specified bucket does not exist"),
        "bucket {bucket} does not exist",
    ),
    (
        re.compile(
            r"(?i)InvalidAccessKeyId|SignatureDoesNotMatch|AccessDenied|403 Forbidden|Status Code: 403|HTTP status 403|"
            r"AWS Error ACCESS_DENIED|credentials were refused|No AWS Credentials"
        ),
        "access denied (check WAP_S3_ACCESS_KEY / WAP_S3_SECRET_KEY)",
    ),
    (
        re.compile(
            r"(?i)Connection refused|Unable to execute HTTP request|connect timed out|ConnectException|"
            r"NETWORK_CONNECTION|Couldn't connect|Could not connect|curlCode: 7|UnknownHostException|"
            r"Failed to connect|connection reset|ConnectTimeoutException|503 Service Unavailable|Status Code: 503|"
            r"HTTP status 503|SlowDown|ServiceUnavailable"
        ),
        "unreachable or unavailable",
    ),
)
_BUCKET = re.compile(r"s3[an]?://([^/\s'\"]+)")


def store_error(settings: Settings, text: str) -> str | None:
    """One line for a failure of the object store found in ``text`` (an exception's text, Java stack
    included), naming the endpoint; None when ``text`` is not a store failure."""
    for pattern, what in _CAUSES:
        if pattern.search(text):
            m = _BUCKET.search(text) or _BUCKET.search(settings.warehouse_uri)
            bucket = m.group(1) if m else "?"
            line = what.format(bucket=repr(bucket))
            return mask_secrets(f"object store {endpoint_label(settings)}: {line}")
    return None


def bucket_of(url: str) -> str:
    """The bucket of an ``s3a://bucket/key`` URL."""
    return urlsplit(url).netloc
