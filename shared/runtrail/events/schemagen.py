"""Write (or check) the committed Avro schemas under ``schemas/``.

``python -m runtrail.events.schemagen`` writes new schemas; ``--check`` fails if any committed
schema differs from what the models generate. An existing file is never rewritten unless
``--force``: changing a retained version breaks every reader of old data, so a change needs a
new version (and an upcaster) instead.
"""

from __future__ import annotations

import argparse
import sys

import runtrail.events  # noqa: F401  (registers every payload model)
from runtrail.events.avro_schemas import generated_schemas, render, schemas_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtrail.events.schemagen")
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    parser.add_argument("--force", action="store_true", help="overwrite changed schemas")
    args = parser.parse_args(argv)
    target = schemas_dir()
    expected = generated_schemas()
    problems = []
    for name, schema in expected.items():
        path = target / name
        content = render(schema)
        if path.exists() and path.read_bytes() == content:
            continue
        if args.check or (path.exists() and not args.force):
            problems.append(f"{name}: {'differs from the model' if path.exists() else 'missing'}")
            continue
        path.write_bytes(content)
        print(f"wrote {path}")
    for stale in sorted(p.name for p in target.glob("*.avsc") if p.name not in expected):
        problems.append(f"{stale}: no model declares it")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
