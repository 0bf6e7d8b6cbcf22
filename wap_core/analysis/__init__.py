"""Read-only looks at a branch: ``diff`` (profiles against main, Spark), ``keyed_diff`` (rows
added/removed/changed by key) and ``explore`` (a table at any ref, and the sandboxed SQL box).
Nothing here moves a ref or writes the journal.
"""
