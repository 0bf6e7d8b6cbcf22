"""The lakehouse's data layer: Iceberg metadata and Spark.

``catalog`` opens the PyIceberg catalog and reads refs and snapshots; ``refs`` makes and removes
branches; ``batch`` finds a branch's batch (its snapshots since the fork); ``metaprofile`` profiles
a batch from manifest statistics alone; ``spark`` starts the one Spark session. Nothing here
journals, authorizes or notifies: those belong to :mod:`wap_core.workflow`.
"""
