"""One S3 setting family, two dialects: WAP_S3_* becomes Spark's S3A conf and PyIceberg's s3.* properties.

No server needed (tests/test_s3.py runs the real thing): what the settings turn into, the secrets'
masking, the REST catalog's Spark conf, the jars' clear error and the one-line store errors.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from wap_core.config import Settings, mask_secrets
from wap_core.exceptions import EnvironmentSetupError, ValidationError
from wap_core.lake import s3
from wap_core.lake.backends import catalog_type_of
from wap_core.lake.backends.rest import rest_uri
from wap_core.lake.catalog import file_io_properties, journal_uri
from wap_core.lake.errors import store_error, store_failure
from wap_core.lake.spark import catalog_conf

KEY, SECRET = "AKIAWAPTESTKEY0001", "wap-test-secret-0123456789abcdef"


def _env(tmp_path: Path, **extra: str) -> Settings:
    env = {
        "WAP_HOME": str(tmp_path),
        "WAP_WAREHOUSE": "s3a://lake/warehouse",
        "WAP_S3_ENDPOINT": "http://127.0.0.1:8333",
        "WAP_S3_ACCESS_KEY": KEY,
        "WAP_S3_SECRET_KEY": SECRET,
        **extra,
    }
    return Settings.from_env(env=env)


def test_one_setting_family_configures_spark_s3a_and_pyiceberg(tmp_path: Path) -> None:
    s = _env(tmp_path)
    spark = s3.spark_conf(s)
    h = "spark.hadoop.fs.s3a."
    assert (spark[h + "endpoint"], spark[h + "access.key"], spark[h + "secret.key"]) == (
        "http://127.0.0.1:8333",
        KEY,
        SECRET,
    )
    assert spark[h + "path.style.access"] == "true" and spark[h + "connection.ssl.enabled"] == "false"
    assert spark["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert spark[h + "bucket.lake.endpoint"] == "http://127.0.0.1:8333"  # the warehouse bucket's own copy
    py = file_io_properties(s)
    assert (py["s3.endpoint"], py["s3.access-key-id"], py["s3.secret-access-key"], py["s3.region"]) == (
        "http://127.0.0.1:8333",
        KEY,
        SECRET,
        "us-east-1",
    )
    assert py["s3.force-virtual-addressing"] == "false"
    conf = catalog_conf(s)  # Spark's Iceberg catalog reads the warehouse through S3A
    assert conf[f"spark.sql.catalog.{s.catalog_name}.io-impl"] == "org.apache.iceberg.hadoop.HadoopFileIO"
    # AWS S3: no endpoint, virtual-hosted addressing, HTTPS
    aws = Settings.from_env(
        env={"WAP_HOME": str(tmp_path), "WAP_WAREHOUSE": "s3://lake/w", "WAP_S3_REGION": "eu-west-1"}
    )
    assert s3.uses_s3(aws) and "spark.hadoop.fs.s3a.endpoint" not in s3.spark_conf(aws)
    assert s3.spark_conf(aws)[h + "path.style.access"] == "false"
    assert file_io_properties(aws)["s3.force-virtual-addressing"] == "true"
    assert file_io_properties(aws)["s3.region"] == "eu-west-1"
    # an explicit catalog property still wins
    own = _env(tmp_path, WAP_CATALOG_PROPERTIES="s3.region=auto")
    assert file_io_properties(own)["s3.region"] == "auto"
    assert s3.spark_conf(_env(tmp_path, WAP_S3_PATH_STYLE="false"))[h + "path.style.access"] == "false"
    with pytest.raises(ValidationError, match="s3_path_style"):
        _env(tmp_path, WAP_S3_PATH_STYLE="maybe")
    local = Settings(home=tmp_path)
    assert not s3.uses_s3(local) and file_io_properties(local) == {}


def test_the_keys_are_masked_and_not_in_repr(tmp_path: Path) -> None:
    s = _env(tmp_path)
    assert SECRET not in repr(s) and KEY not in repr(s)
    assert mask_secrets(f"failed with key {KEY} and {SECRET}") == "failed with key *** and ***"
    rest = _env(tmp_path, WAP_CATALOG_PROPERTIES="credential=client-wap:rest-secret-987654321")
    assert "rest-secret-987654321" not in mask_secrets(
        f"token request credential={dict(rest.catalog_properties)['credential']}"
    )


def test_rest_catalog_spark_conf_and_the_journal_database(tmp_path: Path) -> None:
    s = _env(tmp_path, WAP_CATALOG_URI="rest+http://127.0.0.1:8181/cat", WAP_WAREHOUSE="s3://tables")
    assert catalog_type_of(s).name == "rest" and rest_uri(s) == "http://127.0.0.1:8181/cat"
    p = f"spark.sql.catalog.{s.catalog_name}"
    conf = catalog_conf(s)
    assert (conf[f"{p}.type"], conf[f"{p}.uri"], conf[f"{p}.warehouse"]) == (
        "rest",
        "http://127.0.0.1:8181/cat",
        "s3://tables",
    )
    assert (
        conf[f"{p}.io-impl"] == "org.apache.iceberg.hadoop.HadoopFileIO"
        and f"{p}.jdbc.schema-version" not in conf
    )
    assert journal_uri(s) == f"sqlite:///{(tmp_path / 'journal.db').resolve()}"
    pg = _env(
        tmp_path,
        WAP_CATALOG_TYPE="rest",
        WAP_CATALOG_URI="http://cat:8181",
        WAP_JOURNAL_URI="postgresql+psycopg2://wap:pw-journal-123@db/j",
    )
    assert (
        catalog_type_of(pg).name == "rest"
        and journal_uri(pg).endswith("@db/j")
        and "pw-journal-123" not in mask_secrets(journal_uri(pg))
    )
    with pytest.raises(ValidationError, match="rest\\+http"):
        rest_uri(_env(tmp_path, WAP_CATALOG_TYPE="rest"))
    with pytest.raises(ValidationError, match="catalog_type"):
        _env(tmp_path, WAP_CATALOG_TYPE="hive")


def test_missing_jars_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentSetupError, match="make setup-s3"):
        s3.s3a_jars(_env(tmp_path, **{s3.JARS_ENV: str(tmp_path)}))
    # make setup-s3 (part of make test) put them in the default folder
    assert all(Path(j).is_file() for j in s3.s3a_jars(_env(tmp_path)))


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            "OSError: AWS Error NETWORK_CONNECTION during HeadObject operation: curlCode: 7, Could not connect to server",
            "object store http://127.0.0.1:8333: unreachable or unavailable",
        ),
        (
            "java.nio.file.AccessDeniedException: s3a://lake/w/x: getFileStatus on s3a://lake/w/x: "
            "com.amazonaws.services.s3.model.AmazonS3Exception: Forbidden (Service: Amazon S3; Status Code: 403)",
            "object store http://127.0.0.1:8333: access denied (check WAP_S3_ACCESS_KEY / WAP_S3_SECRET_KEY)",
        ),
        (
            "org.apache.iceberg.exceptions.RuntimeIOException: Failed to create file: s3a://nope/w/x.avro "
            "Caused by: com.amazonaws.services.s3.model.AmazonS3Exception: The specified bucket does not exist (NoSuchBucket)",
            "object store http://127.0.0.1:8333: bucket 'nope' does not exist",
        ),
        ("ValueError: the row count is wrong", None),
    ],
)
def test_store_failures_are_one_line_naming_the_endpoint(tmp_path: Path, text: str, line: str | None) -> None:
    s = _env(tmp_path)
    assert store_error(s, text + f" key={SECRET}") == line
    assert store_failure(OSError(text + f" key={SECRET}"), s) == line
    assert store_failure(OSError(text), Settings(home=tmp_path)) is None  # no object store configured
