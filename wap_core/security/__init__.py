"""Who may do what, and what input may reach Spark or the file system.

``access`` is the one place authorization is decided (roles, per-table policies), so the CLI and
every page obey the same rules; ``sql_guard`` judges a user's SQL on Spark's resolved plan against
an allowlist of operators and functions; ``paths`` confines server-side ingest sources to the
allowed roots.
"""
