"""runtrail — the flight recorder for AI-agent runs.

The core library: event schemas and codec (:mod:`runtrail.events`), the agent-side
publisher (:mod:`runtrail.publisher`), the Kafka transport and consumer runtime
(:mod:`runtrail.kafka`, :mod:`runtrail.runtime`) and the local broker tooling.
"""

__version__ = "0.1.0"
