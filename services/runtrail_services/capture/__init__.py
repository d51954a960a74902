"""``capture``: pairs runtime events into node I/O records and stores them (seed 000 §1).

:mod:`.service` is the consumer service (``runtrail run capture``), :mod:`.settings` its
configuration, :mod:`.metrics` its Prometheus series. The pairing, sinks, readers and replay
are the library in :mod:`runtrail.capture`; this package only wires them to the runtime.
"""
