"""``ResumeCache``: the content-addressed record of completed nodes (seed 000 §3).

Decides "has this node already been done?". A MODEL node is looked up by its whole canonical
prompt, a TOOL node by its name and canonical arguments (:mod:`.keys`). Entries are always
scoped by tenant, and by run: a cache is made for the run it executes (a re-run resumes run R
by passing R's run ID), and with the default :attr:`Scope.RUN` only R's own results are served,
so one run's non-deterministic answers never leak into an unrelated run. :attr:`Scope.TENANT`
serves any run's result of the same tenant (the seed's "same input, any session → hit").

Local first, then the shared ``remote`` source (the service or the compacted topic) if one is
configured. A remote that cannot answer never raises here: the lookup becomes an *untrusted*
miss (counted in :attr:`lookup_failures` and logged); the decorators then degrade to a real
call, except where that could repeat a side effect (see :mod:`.tool_executor`).

Open intents — tool calls started but not finished — are kept beside the entries, locally and in
the service, so a re-run can tell "never ran" from "ran, outcome unknown". Those an earlier life
of the run left (from :meth:`ResumeCache.resume`, a cache file, or a remote lookup) are
*inherited*: :meth:`ResumeCache.inherited_intents` lists them by step, so the tool executor can
hold every call of a step whose earlier call's outcome is unknown, whatever its arguments.

References in what the remote answers (content published by reference) are opened with the
``resolver`` given, else with the content store of the environment's settings
(:func:`runtrail.privacy.resolve.resolver_from_settings`, built on the first reference met):
the agent gets the model's answer, never a reference; content that cannot be opened here reads
as the erased marker.

First outcome wins: recording a key that already has an entry keeps the existing one, so a
replayed run always sees what its first attempt saw. Failed tool calls and errored model calls
are never recorded (the decorators only record successes). Thread-safe.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtrail.privacy.reference import PREFIX
from runtrail.resume.entry import CacheEntry, Intent, ModelResult, RunState
from runtrail.resume.errors import CacheUnavailable
from runtrail.resume.keys import Kind, Scope, intent_id, model_key, tool_key
from runtrail.resume.persistence import read_cache_file, write_cache_file
from runtrail.resume.remote import CacheSource, Lookup, merge_offsets

if TYPE_CHECKING:
    from runtrail.privacy.resolve import Resolver

log = logging.getLogger(__name__)

OffsetsFn = Callable[[], Mapping[int, int]]
EntryKey = tuple[str, str, Kind, str]


@dataclass(frozen=True, slots=True)
class ToolLookup:
    """The answer for one tool call.

    ``entry`` on a hit. On a miss, ``intent`` is the run's open call with the same key (its
    outcome is unknown), and ``trusted`` says whether the miss can be believed: False when the
    shared cache could not answer, so the call may have run in an earlier life of the run.
    """

    entry: CacheEntry | None
    intent: Intent | None = None
    trusted: bool = True


@dataclass
class Counters:
    """Seed 000 §3.6: how many nodes were replayed vs. really executed."""

    model_hits: int = 0
    model_misses: int = 0
    tool_hits: int = 0
    tool_misses: int = 0
    lookup_failures: int = 0


class _Counter:
    """A read-only attribute of the cache: the :class:`Counters` field of the same name."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, cache: ResumeCache, owner: type | None = None) -> int:
        return int(getattr(cache.counters, self.name))


class ResumeCache:
    """Content-addressed results of one run's nodes; see the module docstring."""

    def __init__(
        self,
        run_id: str,
        *,
        tenant: str = "default",
        scope: Scope = Scope.RUN,
        remote: CacheSource | None = None,
        fresh_run: bool = False,
        read_your_writes: OffsetsFn | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        """``fresh_run``: the caller guarantees no earlier attempt of ``run_id`` exists, so with
        :attr:`Scope.RUN` the remote is not asked at all and degrading is always safe.
        ``read_your_writes``: offsets (e.g. ``Publisher.acked_offsets``) every remote lookup
        carries, so entries published by this process are not missed because the service has
        not consumed them yet. ``resolver``: opens the protected content of entries and intents
        the remote answers with (erased content reads as the erased marker, never a fresh call);
        by default the content store of :func:`runtrail.config.load_settings`."""
        if not run_id:
            raise ValueError("a resume cache belongs to a run: pass its run ID")
        self.run_id = run_id
        self.tenant = tenant
        self.scope = Scope(scope)
        self.remote = remote
        self.fresh_run = fresh_run
        self._read_your_writes = read_your_writes
        self._resolver = resolver
        self._baseline: dict[int, int] = {}
        self._lock = threading.RLock()
        self._entries: dict[EntryKey, CacheEntry] = {}
        self._latest: dict[tuple[str, Kind, str], CacheEntry] = {}
        self._model_order: list[EntryKey] = []
        self._intents: dict[tuple[str, str, str], Intent] = {}
        #: keys of the open intents an earlier life of the run left (not this process's calls)
        self._inherited: set[tuple[str, str, str]] = set()
        self.counters = Counters()
        #: The recorded state :meth:`resume` found when an earlier life left events (None for
        #: a new run): what the recorder's ``run.resumed`` says this process continues.
        self.resumed: RunState | None = None

    # --- counters (seed 000 §3.6), read from :attr:`counters` ---------------------------------
    model_hits = _Counter()
    model_misses = _Counter()
    tool_hits = _Counter()
    tool_misses = _Counter()
    #: remote lookups that could not be answered (each degraded to a real call or refused)
    lookup_failures = _Counter()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    # --- resume ---------------------------------------------------------------------------
    def require_offsets(self, offsets: Mapping[int, int]) -> None:
        """Every later remote lookup waits until the source has consumed these offsets."""
        with self._lock:
            self._baseline = merge_offsets(self._baseline, offsets)

    def min_offsets(self) -> dict[int, int]:
        """What a remote lookup carries now: the resume baseline plus this process's writes."""
        own = self._read_your_writes() if self._read_your_writes is not None else None
        with self._lock:
            return merge_offsets(self._baseline, own)

    def resume(self, baseline: Mapping[int, int] | None = None) -> RunState:
        """Start resuming this run: remember ``baseline`` (see :func:`.barrier.resume_barrier`)
        and fetch the run's state — its last sequence and open intents — from the remote.

        Raises :class:`CacheUnavailable` when there is no remote or it cannot answer: a resume
        that cannot see the record must not pretend the run is new.
        """
        if baseline:
            self.require_offsets(baseline)
        if self.remote is None:
            with self._lock:
                intents = tuple(i for k, i in self._intents.items() if k[:2] == self._scope_id())
            return RunState(self.tenant, self.run_id, 0, intents)
        state = self.remote.run_state(
            tenant=self.tenant, run_id=self.run_id, min_offsets=self.min_offsets()
        )
        if state.open_intents:
            opened = tuple(self._opened_intent(i) for i in state.open_intents)
            state = dataclasses.replace(state, open_intents=opened)
        self._inherit(state.open_intents)
        with self._lock:
            if state.seen:
                self.resumed = state
        return state

    # --- model nodes ----------------------------------------------------------------------
    def lookup_model(self, prompt: Any) -> ModelResult | None:
        """The recorded result for ``prompt``, or None (counted as a hit or a miss)."""
        key = model_key(prompt)
        entry, _, _ = self._find(Kind.MODEL, key)
        with self._lock:
            if entry is None:
                self.counters.model_misses += 1
                return None
            self.counters.model_hits += 1
        return entry.model_result()

    def record_model(
        self,
        prompt: Any,
        result: ModelResult,
        *,
        step: int | None = None,
        turn_id: str | None = None,
    ) -> CacheEntry:
        """Record a completed model call (never call this for an errored one)."""
        return self._record(
            Kind.MODEL, model_key(prompt), result.to_json(), step=step, turn_id=turn_id
        )

    def remove_last_model_entry(self) -> bool:
        """Forget the most recently recorded model result: simulates "crashed just before the
        last step" (seed 000 §3.6). Returns whether there was one."""
        with self._lock:
            while self._model_order:
                ek = self._model_order.pop()
                entry = self._entries.pop(ek, None)
                if entry is None:
                    continue
                latest_key = (entry.tenant_id, entry.kind, entry.key)
                if self._latest.get(latest_key) is entry:
                    del self._latest[latest_key]
                    self._reindex_latest(latest_key)
                return True
            return False

    # --- tool nodes -----------------------------------------------------------------------
    def lookup_tool(self, tool_name: str, arguments: Any) -> ToolLookup:
        """The recorded output of this call, or a miss with the open intent, if any."""
        key = tool_key(tool_name, arguments)
        entry, intent, trusted = self._find(Kind.TOOL, key)
        with self._lock:
            if entry is None:
                self.counters.tool_misses += 1
            else:
                self.counters.tool_hits += 1
        return ToolLookup(entry, intent, trusted)

    def record_tool(
        self,
        tool_name: str,
        arguments: Any,
        output: Any,
        *,
        call_id: str | None = None,
        step: int | None = None,
        turn_id: str | None = None,
    ) -> CacheEntry:
        """Record a successful tool call (never call this for a failed one)."""
        return self._record(
            Kind.TOOL,
            tool_key(tool_name, arguments),
            output,
            step=step,
            turn_id=turn_id,
            call_id=call_id,
            tool_name=tool_name,
        )

    def open_intent(
        self,
        tool_name: str,
        arguments: Any,
        *,
        call_id: str | None,
        step: int | None = None,
        turn_id: str | None = None,
        session_id: str | None = None,
    ) -> Intent:
        """Note that a call is about to take effect (its outcome is unknown until resolved)."""
        intent = Intent(
            self.tenant,
            self.run_id,
            intent_id(turn_id, step, call_id, tool_name),
            tool_key(tool_name, arguments),
            tool_name,
            call_id,
            arguments,
            step=step,
            turn_id=turn_id,
            session_id=session_id,
        )
        with self._lock:
            self._intents[(intent.tenant_id, intent.run_id, intent.intent_id)] = intent
        return intent

    def resolve_intent(self, intent: Intent) -> None:
        """The call's outcome is known (recorded, or failed): it is no longer open."""
        with self._lock:
            key = (intent.tenant_id, intent.run_id, intent.intent_id)
            self._intents.pop(key, None)
            self._inherited.discard(key)

    def inherited_intents(self, step: int | None, turn_id: str | None) -> list[Intent]:
        """This run's open intents in ``step`` of ``turn_id`` that an earlier life left (not
        the calls this process has in flight), oldest first. None for a call with no step."""
        if step is None:
            return []
        turn = turn_id or None
        with self._lock:
            return [
                intent
                for key, intent in self._intents.items()
                if key in self._inherited
                and key[:2] == self._scope_id()
                and intent.step == step
                and (intent.turn_id or None) == turn
            ]

    def _inherit(self, intents: Iterable[Intent]) -> None:
        with self._lock:
            for intent in intents:
                key = (intent.tenant_id, intent.run_id, intent.intent_id)
                if key not in self._intents:
                    self._intents[key] = intent
                    self._inherited.add(key)

    def open_intents(self) -> list[Intent]:
        with self._lock:
            return list(self._intents.values())

    # --- entries --------------------------------------------------------------------------
    def put(self, entry: CacheEntry) -> CacheEntry:
        """Add an entry (first outcome wins); returns the entry now held for its key."""
        ek: EntryKey = (entry.tenant_id, entry.run_id, entry.kind, entry.key)
        with self._lock:
            held = self._entries.get(ek)
            if held is not None:
                return held
            self._entries[ek] = entry
            self._latest[(entry.tenant_id, entry.kind, entry.key)] = entry
            if entry.kind is Kind.MODEL:
                self._model_order.append(ek)
            return entry

    def _record(self, kind: Kind, key: str, result: Any, **coordinates: Any) -> CacheEntry:
        """:meth:`put` an entry of this cache's tenant and run; ``coordinates`` are the
        :class:`CacheEntry` fields that say where it was recorded (step, turn, call)."""
        return self.put(CacheEntry(self.tenant, self.run_id, kind, key, result, **coordinates))

    def entries(self) -> list[CacheEntry]:
        with self._lock:
            return list(self._entries.values())

    def _scope_id(self) -> tuple[str, str]:
        return (self.tenant, self.run_id)

    def _local(self, kind: Kind, key: str) -> tuple[CacheEntry | None, Intent | None]:
        with self._lock:
            if self.scope is Scope.RUN:
                entry = self._entries.get((self.tenant, self.run_id, kind, key))
            else:
                entry = self._latest.get((self.tenant, kind, key))
            intent = None
            if entry is None and kind is Kind.TOOL:
                for (tenant, run, _), open_ in self._intents.items():
                    if tenant == self.tenant and run == self.run_id and open_.key == key:
                        intent = open_
                        break
            return entry, intent

    def _open(self, tenant: str, value: Any) -> Any:
        """``value`` with its references opened (see the module docstring)."""
        resolver = self._resolver
        if resolver is None:
            if not _holds_reference(value):
                return value
            resolver = self._default_resolver()
        return resolver.value(tenant, value)

    def _default_resolver(self) -> Resolver:
        from runtrail.privacy.resolve import Resolver, resolver_from_settings

        with self._lock:
            if self._resolver is None:
                try:
                    from runtrail.config import load_settings

                    self._resolver = resolver_from_settings(load_settings())
                except Exception:  # no usable settings: nothing can be opened here
                    log.exception("resume cache: no content store to open references with")
                    self._resolver = Resolver(None)
            return self._resolver

    def _opened(self, entry: CacheEntry) -> CacheEntry:
        result = self._open(entry.tenant_id, entry.result)
        return entry if result is entry.result else dataclasses.replace(entry, result=result)

    def _opened_intent(self, intent: Intent) -> Intent:
        arguments = self._open(intent.tenant_id, intent.arguments)
        if arguments is intent.arguments:
            return intent
        return dataclasses.replace(intent, arguments=arguments)

    def _find(self, kind: Kind, key: str) -> tuple[CacheEntry | None, Intent | None, bool]:
        entry, intent = self._local(kind, key)
        if entry is not None or self.remote is None:
            return entry, intent, True
        if self.fresh_run and self.scope is Scope.RUN:
            return None, intent, True
        try:
            answer: Lookup = self.remote.lookup(
                tenant=self.tenant,
                run_id=self.run_id,
                kind=kind,
                key=key,
                scope=self.scope,
                min_offsets=self.min_offsets(),
            )
        except CacheUnavailable as exc:
            with self._lock:
                self.counters.lookup_failures += 1
            log.warning(
                "resume cache: %s lookup failed, treated as an untrusted miss: %s", kind, exc
            )
            return None, intent, False
        except Exception as exc:  # a broken source must never take the agent down
            with self._lock:
                self.counters.lookup_failures += 1
            log.exception("resume cache: %s lookup raised %s", kind, type(exc).__name__)
            return None, intent, False
        if answer.entry is not None:
            return self.put(self._opened(answer.entry)), None, True
        if intent is None and answer.intent is not None:
            intent = self._opened_intent(answer.intent)
            self._inherit((intent,))
        return None, intent, True

    def _reindex_latest(self, latest_key: tuple[str, Kind, str]) -> None:
        tenant, kind, key = latest_key
        for ek, entry in self._entries.items():
            if ek[0] == tenant and ek[2] == kind and ek[3] == key:
                self._latest[latest_key] = entry

    # --- persistence (seed 000 §3.5) --------------------------------------------------------
    def save_json(self, path: Path | str) -> int:
        """Write every entry and open intent to ``path`` atomically; returns the entry count."""
        with self._lock:
            entries = list(self._entries.values())
            intents = list(self._intents.values())
        return write_cache_file(path, entries, intents)

    def load_entries(self, entries: Iterable[CacheEntry], intents: Iterable[Intent] = ()) -> None:
        for entry in entries:
            self.put(entry)
        self._inherit(intents)

    @classmethod
    def load_json(cls, path: Path | str, run_id: str, **options: Any) -> ResumeCache:
        """A cache for ``run_id`` holding what ``path`` holds; empty when it does not exist."""
        cache = cls(run_id, **options)
        entries, intents = read_cache_file(path)
        cache.load_entries(entries, intents)
        return cache


def _holds_reference(value: Any) -> bool:
    kind = type(value)
    if kind is str:
        return PREFIX in value
    if kind is dict:
        return any(_holds_reference(v) for v in value.values())
    if kind is list:
        return any(_holds_reference(v) for v in value)
    return False
