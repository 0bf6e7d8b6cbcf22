"""WAP Console: the router and shared chrome. Pages live in pages/; business logic in wap_core."""

from __future__ import annotations

import streamlit as st

from pages._common import (
    auth_configured,
    context,
    lakehouse,
    md,
    run_page,
    secrets_problem,
    signed_in_user,
    spark_starter,
    spark_status,
    start_spark_in_background,
)
from wap_core import api
from wap_core.api import Permission, spark_running
from wap_core.exceptions import WapError

st.set_page_config(page_title="WAP Console", page_icon=":material/fact_check:", layout="wide")

PAGES = {
    "Lakehouse": [
        st.Page(
            "pages/overview.py", title="Overview", icon=":material/dashboard:", url_path="", default=True
        ),
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
        st.Page(
            "pages/quarantine.py", title="Quarantine", icon=":material/inventory_2:", url_path="quarantine"
        ),
    ],
}

# ----------------------------------------------------------------------------- the gate (before anything else)
problem = secrets_problem()
sign_in = auth_configured()
if problem is not None or (sign_in and signed_in_user() is None):
    st.navigation(PAGES, position="hidden")  # routes only; no page runs and the sidebar stays empty
    st.title("WAP Console")
    if problem is not None:
        st.error(problem)
    else:
        st.write("Sign in to review, publish and explore the lakehouse.")
        if st.button("Sign in", icon=":material/login:", type="primary"):
            st.login()
    st.stop()


@st.fragment(run_every=2)
def live_spark_status() -> None:
    """Spark's status every 2 s while it starts. Once it has started (or failed), one run of the whole page
    draws the plain caption and this fragment's ticks end: a tick every 2 s for the session's life would
    be a run beside every click of the steward's (a dialog's Enter went unanswered under load in CI)."""
    if not spark_starter().starting:
        st.rerun()
    st.caption(spark_status())


# Routes only: the sidebar's links are drawn below (sidebar_links). Streamlit's own list is off from the first
# message on (.streamlit/config.toml, client.showSidebarNavigation = false): before this line runs, it listed
# every file of pages/ ("common", "review parts", "workflow"...) for seconds on a first load.
nav = st.navigation(PAGES, position="hidden")
try:
    lh = lakehouse()
except WapError as exc:  # a configured file or folder that is not there (WAP_ACCESS...): one line, and stop
    st.error(md(str(exc)))
    st.stop()
start_spark_in_background()  # once per process (WAP_SPARK_EAGER=0 turns it off); pages never block on it
ctx = context()  # who acts (wap_core.api.open_context): the signed-in user, else WAP_USER / the OS user
user = ctx.user
try:
    policy = api.access_policy(ctx)
    can_read = api.may(ctx, Permission.READ)
except WapError as exc:  # a broken access file stops the console; it never means "everyone is admin"
    st.error(md(str(exc)))
    if sign_in and st.sidebar.button("Sign out", icon=":material/logout:"):
        st.logout()
    st.stop()
if not can_read.allowed:
    st.error(f"{md(can_read.message)}. Ask an admin to add you to the access file.")
    if sign_in and st.sidebar.button("Sign out", icon=":material/logout:"):
        st.logout()
    st.stop()


def sidebar_links() -> None:
    """The console's pages by section, as Streamlit's navigation would list them (the current one marked)."""
    for section, pages in PAGES.items():
        st.caption(section)
        for page in pages:
            st.page_link(page)


with st.sidebar:
    sidebar_links()
    st.divider()
    st.markdown("**WAP Console** · Write-Audit-Publish on Iceberg")
    st.caption(f"Catalog {md(lh.settings.catalog_name, code=True)} · {md(lh.settings.masked_catalog_uri)}")
    st.caption(f"Warehouse {md(lh.settings.warehouse_uri)}")
    st.caption(f"Signed in as **{md(user)}**")
    st.caption(
        f"Role: {md(can_read.role_label)}"
        + ("" if policy.enabled else " (access control is off: no access file, everyone is admin)")
    )
    if sign_in:
        if st.button("Sign out", icon=":material/logout:"):
            st.logout()
    else:
        st.caption("sign-in is off (single-user local mode)")
    spark_slot = st.empty()
    live = not spark_running() and spark_starter().starting
    if not live:
        spark_slot.caption(spark_status())
    else:
        with spark_slot.container():
            live_spark_status()  # refreshes itself while Spark starts

try:
    run_page(nav)  # what the page showed once (a write's success message) is consumed when its run ends
finally:
    # After the page ran, so a page that started Spark is reflected at once; never over the live status:
    # replacing its fragment's container by an element while a tick of the fragment is pending (a page that
    # ran for more than its 2 s) blanked the page in the browser (Streamlit's frontend: "'setIn' cannot be
    # called on an ElementNode"). The live status says "running" itself at its next tick.
    if spark_running() and not live:
        spark_slot.caption(spark_status())
