"""Operator control over where a service reads: its own store's positions and its group's.

``runtrail offsets show|set SERVICE`` (see :mod:`runtrail_tools.cli.offsets_cmd`) is built from
:mod:`.group` (the consumer group and the topic, on the broker), :mod:`.stores` (the positions a
service keeps in its own store, which win over the group's on assignment) and :mod:`.plan`
(what a ``set`` moves where, computed before anything is written).
"""
