"""runtrail's tools, above the services: the ``runtrail`` command, the demo, the run explorer,
the dev stack, the offsets tool and the local Kafka broker manager.

Nothing in the library (``runtrail``) or the services (``runtrail_services``) imports this
package; the layers contract in ``pyproject.toml`` (``make test``) keeps it so.
"""
