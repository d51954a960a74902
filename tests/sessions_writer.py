"""A session-store writer run as a child process by the tests (``python -m tests.sessions_writer``).

``save URL COUNT [PAYLOAD]``: save the deterministic snapshot of COUNT events, print its digest.
``load URL TENANT SESSION``: load and restore a snapshot, print revision and digest.
``grow URL PAYLOAD``: continue the stored session one event at a time, saving after each, for
ever (the test kills it with SIGKILL at a random moment); prints ``ready`` once saving began.
"""

from __future__ import annotations

import sys

from runtrail.persistence import SESSION_SNAPSHOTS, open_store
from runtrail.sessions import AgentSession
from tests.sessions_support import built_snapshot, session_events

GROW_LIMIT = 10_000


def main(argv: list[str]) -> int:
    command, url = argv[0], argv[1]
    store = open_store(SESSION_SNAPSHOTS, url)
    if command == "save":
        payload = int(argv[3]) if len(argv) > 3 else 0
        snapshot = built_snapshot(int(argv[2]), payload=payload)
        assert store.save(snapshot)
        print(snapshot.digest, flush=True)
        return 0
    if command == "load":
        loaded = store.load(argv[2], argv[3])
        if loaded is None:
            print("missing", flush=True)
            return 1
        session = AgentSession.from_snapshot(loaded)
        print(session.revision, session.snapshot().digest, flush=True)
        return 0
    if command == "grow":
        payload = int(argv[2])
        stored = store.load("t1", "s1")
        session = AgentSession.from_snapshot(stored) if stored else AgentSession("t1", "s1")
        announced = False
        while session.revision < GROW_LIMIT:
            offset = session.revision
            (event,) = session_events(offset + 1, start=offset, payload=payload)
            session.apply(event, source=("events", 0, offset))
            store.save(session.snapshot())
            if not announced:
                print("ready", flush=True)
                announced = True
        return 0
    raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
