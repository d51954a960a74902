"""The ``noop`` service: the runtime with nothing behind it (tests, benchmark baseline)."""
