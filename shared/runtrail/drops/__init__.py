"""What OTLP ingest did not record, per run: a tally per batch (:mod:`.tally`) and the store
that keeps it (:mod:`.store`), read by ``runtrail otlp drops`` and the run's explorer page; each reason logged
once (:mod:`.first_seen`)."""
