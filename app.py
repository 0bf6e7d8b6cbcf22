"""WAP Console: the router and shared chrome. Pages live in pages/; business logic in wap_core."""

from __future__ import annotations

import streamlit as st

from pages._common import current_user, lakehouse, md, spark_status

st.set_page_config(page_title="WAP Console", page_icon=":material/fact_check:", layout="wide")

PAGES = {
    "Lakehouse": [
        st.Page("pages/overview.py", title="Overview", icon=":material/dashboard:", url_path="", default=True),
        st.Page("pages/branches.py", title="Branches", icon=":material/account_tree:", url_path="branches"),
        st.Page("pages/review.py", title="Review", icon=":material/rate_review:", url_path="review"),
    ],
    "Work": [
        st.Page("pages/ingest.py", title="Ingest", icon=":material/upload_file:", url_path="ingest"),
        st.Page("pages/explore.py", title="Explore", icon=":material/travel_explore:", url_path="explore"),
    ],
    "Records": [
        st.Page("pages/history.py", title="History", icon=":material/history:", url_path="history"),
        st.Page("pages/checks.py", title="Checks", icon=":material/checklist:", url_path="checks"),
    ],
}
nav = st.navigation(PAGES)

with st.sidebar:
    lh = lakehouse()
    st.markdown("**WAP Console** · Write-Audit-Publish on Iceberg")
    st.caption(f"Catalog {md(lh.settings.catalog_name, code=True)} · {md(lh.settings.masked_catalog_uri)}")
    st.caption(f"Warehouse {md(lh.settings.warehouse_uri)}")
    st.caption(f"Signed in as **{md(current_user(lh))}**")
    spark_slot = st.empty()
    spark_slot.caption(spark_status())

try:
    nav.run()
finally:
    # After the page ran, so a page that started Spark is reflected at once.
    spark_slot.caption(spark_status())
