"""A peer check tool as a worker process, in its own environment (bench/.work/venv-gx or venv-soda).

``python -m bench.peer_checks gx|soda FILES_JSON CONF_JSON`` starts Spark with the bench's Spark
configuration (same PySpark version as wap_core), reads the batch's Parquet data files (the very
files of the Iceberg branch wap_core audits), prints ``{"ready": ...}``, then answers one JSON line
per command read on stdin:

- ``run MODE``: validate the suite once (GX: MODE = SUMMARY or BOOLEAN_ONLY; Soda: MODE = default or no_samples);
  prints seconds, the Spark jobs of the run, and per-check failing counts (None when the mode has none);
- ``quit``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from bench.checks_suite import gx_expectations, soda_yaml


class GX:
    def __init__(self, df: Any) -> None:
        import great_expectations as gx

        self.df = df
        self.context = gx.get_context(mode="ephemeral")
        asset = self.context.data_sources.add_spark(name="spark").add_dataframe_asset(name="batch")
        self.batch_definition = asset.add_batch_definition_whole_dataframe("whole")
        self.suite = gx.ExpectationSuite(name="bench")
        for e in gx_expectations():
            self.suite.add_expectation(e)
        self.suite = self.context.suites.add(self.suite)

    def run(self, mode: str) -> dict[str, Any]:
        batch = self.batch_definition.get_batch(batch_parameters={"dataframe": self.df})
        res = batch.validate(self.suite, result_format=mode)
        out: dict[str, Any] = {}
        for r in res.results:
            cid = r.expectation_config.meta["id"]
            if r.exception_info and r.exception_info.get("raised_exception"):
                out[cid] = f"error: {r.exception_info.get('exception_message')}"
            else:
                out[cid] = (r.result or {}).get("unexpected_count")
        return out


class Soda:
    VIEW = "batch"

    def __init__(self, spark: Any, df: Any) -> None:
        self.spark = spark
        df.createOrReplaceTempView(self.VIEW)
        self.sodacl = {"default": soda_yaml(self.VIEW), "no_samples": soda_yaml(self.VIEW, samples=False)}

    def run(self, mode: str) -> dict[str, Any]:
        from soda.scan import Scan

        scan = Scan()
        scan.set_data_source_name("spark_df")
        scan.add_spark_session(self.spark, data_source_name="spark_df")
        scan.add_sodacl_yaml_str(self.sodacl[mode])
        scan.execute()
        out: dict[str, Any] = {}
        for c in scan.get_scan_results().get("checks", []):
            value = (c.get("diagnostics") or {}).get("value")
            out[c.get("name")] = int(value) if isinstance(value, (int, float)) else value
        if scan.has_error_logs():
            out["_errors"] = scan.get_error_logs_text()[-2000:]
        return out


def main(argv: list[str]) -> None:
    tool, files_json, conf_json = argv
    files = json.loads(files_json)
    conf = json.loads(conf_json)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(conf.pop("spark.master")).appName(f"bench-{tool}")
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.read.parquet(*files)
    runner: Any = GX(df) if tool == "gx" else Soda(spark, df)
    import pyspark

    version = pyspark.__version__
    detail = ""
    if tool == "gx":
        import great_expectations

        detail = f"great_expectations {great_expectations.__version__}"
    else:
        from importlib.metadata import version as dist_version

        detail = f"soda-core-spark-df {dist_version('soda-core-spark-df')}"
    print(json.dumps({"ready": True, "pyspark": version, "tool": detail}), flush=True)
    sc = spark.sparkContext
    compilation = sc._jvm.java.lang.management.ManagementFactory.getCompilationMXBean()
    for n, line in enumerate(sys.stdin, start=1):
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        group = f"peer_{tool}_{n}"
        sc.setJobGroup(group, "bench run")
        t0 = time.perf_counter()
        counts = runner.run(cmd[1] if len(cmd) > 1 else "default")
        seconds = time.perf_counter() - t0
        jobs = len(sc.statusTracker().getJobIdsForGroup(group))
        jit_ms = int(compilation.getTotalCompilationTime())  # the JVM's JIT compile time so far
        print(
            json.dumps({"seconds": seconds, "jobs": jobs, "counts": counts, "jit_ms": jit_ms}, default=str),
            flush=True,
        )
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
