"""The Airflow tests' own DAGs (tests/pipelines/test_airflow.py links this file into its DAGs folder)."""

from __future__ import annotations

from airflow.sdk import DAG, Param

from wap_core.integrations.airflow import (
    WapAuditOperator,
    WapDecisionSensor,
    WapIngestOperator,
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
