"""Orchestrator adapters over :mod:`wap_core.pipeline`, one module per extra.

``wap_core.integrations.airflow`` needs ``wap-console[airflow]``, ``.prefect`` ``[prefect]``, ``.dbos``
``[dbos]``. Nothing in the core imports them: the core install pulls no orchestrator.
"""
