"""One pipeline process for tests/pipelines/test_dbos.py: launch DBOS, start (or resume) the workflow, print its result.

``python dbos_run.py <system-db-url> <workflow-id> <table> <source> <timeout> <poll>``; tables and sources
joined by ``+`` (``demo.items+demo.orders a.csv+b.csv``) run the batch workflow of those pairs. When the workflow
exists already (a killed earlier process started it), ``DBOS.launch()`` recovers it and this process only
waits for its result. Prints one JSON line: {"result": ...} or {"error": type, "decision": ...}.
"""

from __future__ import annotations

import json
import sys

from dbos import DBOS, SetWorkflowID

from wap_core.exceptions import BatchRejectedError
from wap_core.integrations.dbos import wap_batch_workflow, wap_workflow


def main() -> int:
    url, wfid, table, source, timeout, poll = sys.argv[1:7]
    DBOS(config={"name": "wap-pipeline-test", "system_database_url": url, "log_level": "WARNING"})
    DBOS.launch()
    try:
        if DBOS.get_workflow_status(wfid) is None:
            with SetWorkflowID(wfid):
                if "+" in table:
                    pairs = [(t, [x]) for t, x in zip(table.split("+"), source.split("+"), strict=True)]
                    handle = DBOS.start_workflow(
                        wap_batch_workflow, pairs, None, True, float(timeout), float(poll)
                    )
                else:
                    handle = DBOS.start_workflow(
                        wap_workflow, table, [source], True, float(timeout), float(poll)
                    )
            print(json.dumps({"started": wfid}), flush=True)
        else:
            handle = DBOS.retrieve_workflow(wfid)
            print(json.dumps({"resumed": wfid}), flush=True)
        try:
            print(json.dumps({"result": handle.get_result()}), flush=True)
        except BatchRejectedError as exc:
            print(json.dumps({"error": type(exc).__name__, "decision": exc.decision}), flush=True)
    finally:
        DBOS.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
