"""Benchmarks: ``python -m bench.runtime --events 1000000`` (see README)."""
