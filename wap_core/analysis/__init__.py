"""Read-only looks at a branch: ``diff`` (profiles against main, Spark), ``keyed_diff`` (rows
added/removed/changed by key), ``explore`` (a table at any ref, and the guarded SQL box) and
``sandbox`` (the worker processes the console's SQL box runs each query in). Nothing here moves a ref
or writes the journal.
"""
