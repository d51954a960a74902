"""The ``audit`` service: every event sealed into its run's hash chain, kept append-only.

``runtrail run audit`` consumes the events topic and, per (tenant, run) in topic order, seals
``hash = sha256(prevHash + "|" + JCS(event as written))`` (docs/AUDIT_FORMAT.md). Links and
consumer offsets go to the link store in one transaction (exactly-once into the store), sealed
links then go to the audit topic (at-least-once), and signed tree heads over all run heads
are made periodically and on demand (``runtrail audit tree-head``).
"""
