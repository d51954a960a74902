"""``runtrail run otlp-ingest``: an OTLP/HTTP receiver that turns GenAI spans into runtrail events."""
