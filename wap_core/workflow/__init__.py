"""The Write-Audit-Publish actions: each validates, authorizes, moves refs and journals.

``ingest`` writes a batch to a new branch, ``audit`` runs the table's checks, ``publish`` fast-forwards
main (and rebases, discards), ``rollback`` moves main back and reopens a batch, ``review`` keeps
approvals and comments, ``gc`` applies retention, ``reconcile`` decides the intents of crashed
actions, ``status`` derives a branch's state, ``demo`` seeds the demo lakehouse.
"""
