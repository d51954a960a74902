"""Kafka plumbing: the local KRaft broker for development and tests, and the design's topics.

Modules are imported directly (``runtrail_tools.kafka.broker``, ``runtrail.kafka.topics``) so that
importing the package stays cheap for code that only needs one of them.
"""
