"""``runtrail run resume-cache``: the content-addressed cache of completed nodes, as a service."""
