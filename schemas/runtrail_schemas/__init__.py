"""Avro schemas of every retained event type and version (package data)."""
