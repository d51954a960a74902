"""``runtrail demo``: scripted agents through the stack, read back from the services' outputs.

:mod:`.script` fixes the runs, :mod:`.fakes` the model and tools (the only fakes), :mod:`.agent`
runs one script through the resumable decorators and the publisher, :mod:`.runner` drives them
all and waits for the services, :mod:`.readback` and :mod:`.tamper` read the services' outputs,
:mod:`.report` prints them.
"""
