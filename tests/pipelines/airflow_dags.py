"""The Airflow tests' own DAGs (tests/pipelines/test_airflow.py links this file into its DAGs folder)."""

from __future__ import annotations

from typing import Any

from airflow.sdk import DAG, Param, task

from wap_core.integrations.airflow import (
    WapAuditOperator,
    WapDecisionSensor,
    WapIngestOperator,
    WapOpenBranchOperator,
    WapPublishOperator,
)

# Issue 27 item 1: the ingest task has another name than "ingest"; the audit, the sensor and the publish
# find it upstream (the publish names it: source_task_id keeps working).
with DAG(
    dag_id="wap_renamed",
    schedule=None,
    render_template_as_native_obj=True,
    params={"table": Param("demo.orders", type="string"), "sources": Param([], type="array")},
) as renamed:
    write = WapIngestOperator(
        task_id="write", table="{{ params.table }}", sources="{{ params.sources }}", create=True
    )
    check = WapAuditOperator(task_id="check")
    gate = WapDecisionSensor(task_id="gate", mode="reschedule", poke_interval=1, timeout=300)
    ship = WapPublishOperator(task_id="ship", source_task_id="write")
    write >> check >> gate >> ship

# Issue 27 item 1: two ingest tasks write one batch that spans tables; the audit, the sensor and the publish
# act on the whole batch (found upstream: no name given), and the publish moves both mains or none.
with DAG(
    dag_id="wap_batch",
    schedule=None,
    render_template_as_native_obj=True,
    params={
        "batch": Param("day", type="string"),
        "item_sources": Param([], type="array"),
        "order_sources": Param([], type="array"),
    },
) as batch:
    items = WapIngestOperator(
        task_id="write_items",
        table="demo.items",
        sources="{{ params.item_sources }}",
        create=True,
        batch="{{ params.batch }}",
    )
    orders = WapIngestOperator(
        task_id="write_orders",
        table="demo.orders",
        sources="{{ params.order_sources }}",
        create=True,
        batch="{{ params.batch }}",
    )
    audit = WapAuditOperator(task_id="check")
    decision = WapDecisionSensor(task_id="gate", mode="reschedule", poke_interval=1, timeout=300)
    publish = WapPublishOperator(task_id="ship")
    [items, orders] >> audit >> decision >> publish

# Issue 37 item 1, seed-style: the DAG's own Spark task writes the branch (a MERGE upsert), between the open and
# the audit; the audit, the sensor and the publish find the open task upstream as they find an ingest task.
with DAG(
    dag_id="wap_job",
    schedule=None,
    render_template_as_native_obj=True,
    params={"table": Param("demo.jobs", type="string")},
) as job:
    opened = WapOpenBranchOperator(task_id="open", table="{{ params.table }}")

    @task(task_id="merge")
    def merge(branch: dict[str, Any]) -> int:
        """The user's own Spark job: an upsert into the branch's identifier (the XCom of the open task)."""
        from wap_core import pipeline

        spark = pipeline.lakehouse().spark  # here the pipeline's; a job of its own has its own SparkSession
        spark.sql(
            f"MERGE INTO {branch['identifier']} t USING (SELECT CAST(1 AS bigint) AS id, 'ann-renamed' AS name "
            "UNION ALL SELECT CAST(9 AS bigint), 'ivy') s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
        return 2

    check = WapAuditOperator(task_id="audit")
    gate = WapDecisionSensor(task_id="decision", mode="reschedule", poke_interval=1, timeout=300)
    ship = WapPublishOperator(task_id="publish")
    opened >> merge(opened.output) >> check >> gate >> ship
