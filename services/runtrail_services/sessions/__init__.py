"""``runtrail run sessions``: checkpoint every agent session from the events topic."""
