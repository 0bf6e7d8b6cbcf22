"""Deployment settings without Spark: durations, retention defaults, extra Spark conf and catalog properties."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from wap_core.config import Settings
from wap_core.durations import format_duration, parse_duration
from wap_core.exceptions import ValidationError
from wap_core.lake.spark import catalog_conf


def test_durations_and_retention_settings(tmp_path: Path) -> None:
    assert parse_duration("14d") == timedelta(days=14) and parse_duration("36h") == timedelta(hours=36)
    assert parse_duration("0s") == timedelta(0) and parse_duration("1.5h") == timedelta(minutes=90)
    assert (
        format_duration(timedelta(days=14)) == "14d"
        and format_duration(5400) == "90m"
        and format_duration(0) == "0s"
    )
    for bad in ("", "14", "d", "-1d", "1y", "1d2h"):
        with pytest.raises(ValidationError):
            parse_duration(bad)
    s = Settings.from_env(
        {
            "WAP_BRANCH_TTL": "7d",
            "WAP_SNAPSHOT_RETENTION": "90d",
            "WAP_SPARK_CONF": "spark.executor.memory=1g spark.driver.host=10.0.0.5 "
            "'spark.executor.extraJavaOptions=-Xss4m -XX:+UseG1GC'",
        },
        home=tmp_path,
    )
    assert (s.branch_ttl, s.snapshot_retention) == ("7d", "90d")
    assert s.spark_conf == (
        ("spark.executor.memory", "1g"),
        ("spark.driver.host", "10.0.0.5"),
        ("spark.executor.extraJavaOptions", "-Xss4m -XX:+UseG1GC"),
    )
    assert Settings().branch_ttl == "14d" and Settings().snapshot_retention == "30d"
    with pytest.raises(ValidationError, match="branch_ttl"):
        Settings(branch_ttl="two weeks")
    with pytest.raises(ValidationError, match="not a Spark property"):
        Settings.from_env({"WAP_SPARK_CONF": "executor.memory=1g"}, home=tmp_path)
    (tmp_path / "wap.toml").write_text('branch_ttl = "3d"\n[spark_conf]\n"spark.executor.cores" = "2"\n')
    s = Settings.from_env({}, home=tmp_path)
    assert s.branch_ttl == "3d" and s.spark_conf == (("spark.executor.cores", "2"),)


def test_catalog_properties_reach_pyiceberg_and_spark_and_stay_out_of_reprs(tmp_path: Path) -> None:
    env = {
        "WAP_CATALOG_PROPERTIES": "s3.endpoint=http://127.0.0.1:9 s3.secret-access-key=hush",
        "WAP_SPARK_CONF": "spark.hadoop.fs.s3a.secret.key=hush2",
    }
    s = Settings.from_env(env, home=tmp_path, catalog_name="objstore")
    assert dict(s.catalog_properties) == {"s3.endpoint": "http://127.0.0.1:9", "s3.secret-access-key": "hush"}
    conf = catalog_conf(s)
    assert conf["spark.sql.catalog.objstore.s3.endpoint"] == "http://127.0.0.1:9"
    assert conf["spark.sql.catalog.objstore.uri"].startswith(
        "jdbc:sqlite:"
    )  # wap_core's own keys are not overridable
    assert "hush" not in repr(s)
    from wap_core.lake.catalog import open_catalog

    catalog = open_catalog(s)  # PyIceberg gets the same properties (its FileIO reads s3.*)
    assert (
        catalog.properties["s3.endpoint"] == "http://127.0.0.1:9"
        and catalog.properties["warehouse"] == s.warehouse_uri
    )
    catalog.engine.dispose()
    for bad in ("uri=x", "warehouse=s3://b", "jdbc.user=x", "spark.x=1", "novalue"):
        with pytest.raises(ValidationError, match="catalog_properties"):
            Settings.from_env({"WAP_CATALOG_PROPERTIES": bad}, home=tmp_path)
    with pytest.raises(ValidationError) as info:
        Settings.from_env({"WAP_CATALOG_PROPERTIES": "topsecretvalue"}, home=tmp_path)
    assert "topsecretvalue" not in str(info.value)
