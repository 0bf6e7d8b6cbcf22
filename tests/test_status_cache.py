"""The console's overviews at many tables: one catalog query, metadata parsed once per metadata file, always current."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from wap_core.lake import catalog as cat
from wap_core.workflow.status import list_branches, table_infos


def test_overviews_reuse_parsed_metadata_until_a_table_moves(make_lakehouse: Any) -> None:
    lh = make_lakehouse()
    lh.catalog.create_namespace("m")
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    tables = []
    for i in range(3):
        tbl = lh.catalog.create_table(("m", f"t{i}"), schema=rows.schema)
        tbl.append(rows)
        tables.append(tbl)
    tables[0].manage_snapshots().create_branch(tables[0].current_snapshot().snapshot_id, "b0").commit()

    first = dict(cat.load_tables(lh.catalog))
    again = dict(cat.load_tables(lh.catalog))
    assert [str(t) for t in first] == ["m.t0", "m.t1", "m.t2"]
    assert all(again[t] is first[t] for t in first)  # unchanged metadata file: the parsed table is reused

    tables[1].append(rows)  # a commit writes a new metadata file: the listing must see it at once
    after = dict(cat.load_tables(lh.catalog))
    t1 = next(t for t in after if t.name == "t1")
    assert after[t1] is not first[t1] and after[t1].metadata_location == lh.table(t1).metadata_location
    infos = {i.table: i for i in table_infos(lh)}
    assert infos["m.t1"].rows == 6 and infos["m.t0"].rows == 3 and infos["m.t0"].open_branches == 1
    assert [(b.table, b.branch) for b in list_branches(lh)] == [("m.t0", "b0")]

    lh.catalog.drop_table(("m", "t2"))
    assert "m.t2" not in {i.table for i in table_infos(lh)}
