"""Example DAG: Write-Audit-Publish with WAP Console as the approval gate (``pip install wap-console[airflow]``).

ingest → audit → decision → publish. A batch whose audit passes (and whose table's review policy needs no
approval) publishes at once; otherwise the ``decision`` sensor waits, in reschedule mode, until a person
approves, publishes or discards the batch in the console (the "Open review" link of each task).

Run it with the lakehouse in the environment (``WAP_HOME``, ``WAP_USER`` = the pipeline's service identity):
``airflow dags trigger wap_pipeline --conf '{"table": "demo.orders", "sources": ["/landing/orders.csv"]}'``
"""

from __future__ import annotations

import os
from datetime import timedelta

from airflow.sdk import DAG, Param

from wap_core.integrations.airflow import (
    WapAuditOperator,
    WapDecisionSensor,
    WapIngestOperator,
    WapPublishOperator,
)

with DAG(
    dag_id="wap_pipeline",
    schedule=None,
    catchup=False,
    render_template_as_native_obj=True,  # params.sources stays a list
    params={
        "table": Param("demo.orders", type="string"),
        "sources": Param([], type="array"),
    },
    tags=["wap"],
) as dag:
    ingest = WapIngestOperator(
        task_id="ingest", table="{{ params.table }}", sources="{{ params.sources }}", create=True
    )
    audit = WapAuditOperator(task_id="audit")
    decision = WapDecisionSensor(
        task_id="decision",
        mode="reschedule",
        poke_interval=float(os.environ.get("WAP_DECISION_POLL", "60")),
        timeout=float(os.environ.get("WAP_DECISION_TIMEOUT", timedelta(days=1).total_seconds())),
        deferrable=os.environ.get("WAP_DECISION_DEFERRABLE") == "1",
    )
    publish = WapPublishOperator(task_id="publish")
    ingest >> audit >> decision >> publish
