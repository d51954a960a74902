"""The outbox relay: a command store's appended events onto the events topic."""
