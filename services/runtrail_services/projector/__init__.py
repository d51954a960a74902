"""The projector service: the event-sourced run projection of every run, kept in a store.

``runtrail run projector`` folds the events topic into a projection store (rows and consumer
offsets in one transaction); ``runtrail replay projection --into URL`` rebuilds a fresh store
from the topic (see :mod:`.rebuild`). The semantics live in :mod:`runtrail.projection`.
"""
