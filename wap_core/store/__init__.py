"""What the console remembers, in the catalog's own database (SQLAlchemy, versioned by Alembic).

``journal`` holds the journal, the intents of ref moves in flight and the stored audits; ``profiles``
caches column profiles; ``migrate`` runs the Alembic revisions in ``migrations/``. Stores never read
Iceberg tables and never start Spark.
"""
