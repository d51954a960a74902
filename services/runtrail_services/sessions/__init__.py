"""``runtrail run sessions``: save every agent session's snapshot from the events topic."""
