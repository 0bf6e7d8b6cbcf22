"""Issue 26 item 4: a setting is declared once, as its field (environment variable, parser, rule), and every
``WAP_*`` setting goes through ``Settings``: the environment, wap.toml and validation derive from the field.
"""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path

import pytest

from wap_core.config import ENV_VARS, Settings, env_name, spec_of
from wap_core.exceptions import ValidationError
from wap_core.lake import s3
from wap_core.lake.spark import session_conf

ROOT = Path(__file__).resolve().parent.parent
# WAP_* names that are not settings: test-only fault and pause points, and the CLI's service token (an
# identity, never a setting: wap_core.workflow.tokens)
NOT_SETTINGS = {"WAP_FAULT", "WAP_PAUSE", "WAP_TOKEN"}


def test_every_field_declares_its_environment_variable_once() -> None:
    envs = [spec_of(f).env for f in fields(Settings)]
    named = [e for e in envs if e is not None]
    assert len(named) == len(set(named)), "two settings read the same variable"
    # every field is a setting (who acts is the session's identity, never a field of Settings)
    assert [f.name for f in fields(Settings) if spec_of(f).env is None] == []
    assert ("WAP_CONFIG", *named) == ENV_VARS
    assert env_name("s3a_jars_dir") == "WAP_S3A_JARS_DIR" == s3.JARS_ENV


def test_no_wap_variable_is_read_outside_settings() -> None:
    """Nothing but config.py names a WAP_* variable (so none bypasses Settings and wap.toml)."""
    found: set[str] = set()
    files = [*(ROOT / "wap_core").rglob("*.py"), *(ROOT / "pages").glob("*.py"), ROOT / "app.py"]
    for path in files:
        if path == ROOT / "wap_core" / "config.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            value = node.value if isinstance(node, ast.Constant) else None
            if isinstance(value, str) and re.fullmatch(r"WAP_[A-Z0-9_]+", value):
                found.add(value)
    assert found <= NOT_SETTINGS, f"read outside Settings: {sorted(found - NOT_SETTINGS)}"


def test_the_former_bypassing_settings_live_in_wap_toml(tmp_path: Path) -> None:
    """WAP_SPARK_EAGER, WAP_SPARK_UI and WAP_S3A_JARS_DIR read os.environ directly before: no wap.toml."""
    (tmp_path / "wap.toml").write_text(
        f'spark_eager = false\nspark_ui = true\ns3a_jars_dir = "{tmp_path / "jars"}"\n'
    )
    s = Settings.from_env({"WAP_HOME": str(tmp_path)})
    assert (s.spark_eager, s.spark_ui, s.s3a_jars_dir) == (False, True, tmp_path / "jars")
    assert session_conf(s)["spark.ui.enabled"] == "true"
    assert s3.jars_dir(s) == tmp_path / "jars"
    # the environment wins over the file, with the same words as before ("off" turns eager start off)
    env = Settings.from_env({"WAP_HOME": str(tmp_path), "WAP_SPARK_EAGER": "1", "WAP_SPARK_UI": "false"})
    assert (env.spark_eager, env.spark_ui) == (True, False)
    assert not Settings.from_env({"WAP_HOME": str(tmp_path), "WAP_SPARK_EAGER": "off"}).spark_eager
    assert session_conf(Settings(home=tmp_path))["spark.ui.enabled"] == "false"


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("WAP_QUERY_NICE", "20", "query_nice (WAP_QUERY_NICE) must be between 0 and 19"),
        ("WAP_QUERY_TIMEOUT", "0", "query_timeout (WAP_QUERY_TIMEOUT) must be > 0 seconds"),
        ("WAP_QUERY_SLOTS", "0", "query_workers (WAP_QUERY_WORKERS) and query_slots (WAP_QUERY_SLOTS)"),
        ("WAP_CATALOG_TYPE", "hive", "catalog_type (WAP_CATALOG_TYPE) must be 'sql' or 'rest', got 'hive'"),
        ("WAP_BRANCH_TTL", "soon", "invalid branch_ttl 'soon'"),
        ("WAP_SPARK_UI", "maybe", "setting spark_ui must be true or false"),
        ("WAP_SHUFFLE_PARTITIONS", "x", "setting shuffle_partitions must be an integer"),
    ],
)
def test_rules_come_from_the_declaration(tmp_path: Path, var: str, value: str, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        Settings.from_env({"WAP_HOME": str(tmp_path), var: value})
    # the same rule holds for a value given in wap.toml
    name = next(f.name for f in fields(Settings) if spec_of(f).env == var)
    (tmp_path / "wap.toml").write_text(f'{name} = "{value}"\n')
    with pytest.raises(ValidationError, match=re.escape(message)):
        Settings.from_env({"WAP_HOME": str(tmp_path)})


def test_one_s3_endpoint_wherever_it_is_given(tmp_path: Path) -> None:
    """s3.endpoint in WAP_CATALOG_PROPERTIES / the S3A keys in WAP_SPARK_CONF are the store's endpoint too (the
    store on the real SeaweedFS: tests/test_s3_store.py); different endpoints are refused naming the setting."""
    end = "http://127.0.0.1:9"
    s = Settings.from_env(
        {
            "WAP_HOME": str(tmp_path),
            "WAP_CATALOG_PROPERTIES": f"s3.endpoint={end} s3.access-key-id=idid s3.secret-access-key=secret-77",
            "WAP_SPARK_CONF": f"spark.hadoop.fs.s3a.endpoint={end}/ spark.hadoop.fs.s3a.path.style.access=false",
        }
    )
    assert (s.s3_endpoint, s.s3_access_key, s.s3_secret_key, s.s3_path_style) == (
        end,
        "idid",
        "secret-77",
        False,
    )
    assert s3.endpoint_label(s) == end and s3.uses_s3(s)
    assert (
        s3.spark_conf(Settings(home=tmp_path, warehouse="s3a://lake/w", spark_conf=s.spark_conf))[
            "spark.hadoop.fs.s3a.bucket.lake.endpoint"
        ]
        == end
    )
    with pytest.raises(ValidationError) as info:
        Settings.from_env(
            {
                "WAP_HOME": str(tmp_path),
                "WAP_S3_ENDPOINT": "http://other:8333",
                "WAP_CATALOG_PROPERTIES": f"s3.endpoint={end}",
            }
        )
    assert str(info.value) == (
        "the S3 endpoint is given differently in WAP_S3_ENDPOINT and WAP_CATALOG_PROPERTIES (s3.endpoint): "
        "give it once, in WAP_S3_ENDPOINT"
    )
