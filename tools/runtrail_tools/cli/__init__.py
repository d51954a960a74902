"""The ``runtrail`` command line: one module per command group."""
