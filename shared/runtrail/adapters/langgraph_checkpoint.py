"""A LangGraph checkpointer on runtrail's session stores: durable, tenant-scoped, verified threads.

``RuntrailCheckpointSaver.from_url("file:///var/lib/runtrail/sessions", tenant_id="acme")`` (or a
``postgresql://…`` URL, the same one the sessions service uses) gives a LangGraph graph durable
threads on the stack it already runs. What is stored where is in
:mod:`runtrail.sessions.checkpoints`: per thread, one sealed record per checkpoint, per channel
value at a version (only the channels a step changed, as LangGraph's own savers do), and per
pending write. Values go through LangGraph's serializer (``JsonPlusSerializer`` by default), so
any state LangGraph can checkpoint is stored; the record around it is RFC 8785 JSON sealed by a
digest and checked on every read, so an edited checkpoint raises
:class:`~runtrail.sessions.checkpoints.CorruptCheckpoint` naming the file or row instead of
silently steering a graph.

The tenant is fixed per saver (not read from the graph's config), so no ``thread_id`` a caller
passes can reach another tenant's threads. The ``a*`` methods run the store calls in a worker
thread, so an async graph's event loop is never blocked on disk or database I/O.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from runtrail.adapters.langgraph_marks import RUN as RUNTRAIL_RUN
from runtrail.persistence.kinds import LANGGRAPH_CHECKPOINTS
from runtrail.persistence.registry import open_store
from runtrail.sessions.checkpoints import (
    CheckpointBackend,
    Key,
    Row,
    make_key,
    seal_record,
    typed_json,
    typed_value,
)

__all__ = ["RuntrailCheckpointSaver"]

Fields = dict[str, Any]
# Aliases: inside the class, ``list`` names the LangGraph method, not the builtin.
Rows = list[Row]
Keys = list[Key]
Writes = list[PendingWrite]
#: The serializer type LangGraph uses for "no value at this version" (a channel emptied).
EMPTY = "empty"


class RuntrailCheckpointSaver(BaseCheckpointSaver[str]):
    """``BaseCheckpointSaver`` over a :class:`CheckpointBackend` (file or PostgreSQL)."""

    def __init__(
        self,
        backend: CheckpointBackend,
        *,
        tenant_id: str = "default",
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        if not tenant_id:
            raise ValueError("a checkpointer needs a tenant ID")
        self.backend = backend
        self.tenant_id = tenant_id

    @classmethod
    def from_url(
        cls, url: str, *, tenant_id: str = "default", serde: SerializerProtocol | None = None
    ) -> RuntrailCheckpointSaver:
        """A saver on the store a session-store URL names (``file:///dir``, ``postgresql://…``)."""
        return cls(open_store(LANGGRAPH_CHECKPOINTS, url), tenant_id=tenant_id, serde=serde)

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> RuntrailCheckpointSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- keys ---------------------------------------------------------------------------------
    def _key(self, thread: str, kind: str, ns: str, *rest: str) -> Key:
        return make_key(self.tenant_id, thread, kind, ns, *rest)

    # --- reading ------------------------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        _, thread, ns = _scope(config)
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id:
            fields = self.backend.read(self._key(thread, "checkpoint", ns, checkpoint_id))
            if fields is None:
                return None
            return self._tuple(thread, ns, checkpoint_id, fields)
        newest = self.backend.newest(self.tenant_id, "checkpoint", thread, ns)
        if newest is None:
            return None
        fields = self.backend.read(self._key(thread, "checkpoint", ns, newest))
        if fields is None:  # deleted in between
            return None
        return self._tuple(thread, ns, newest, fields)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        conf = config["configurable"] if config else {}
        threads = (
            [str(conf["thread_id"])]
            if conf.get("thread_id") is not None
            else self.backend.threads(self.tenant_id)
        )
        ns = conf.get("checkpoint_ns")
        wanted_id = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        remaining = limit
        for thread in threads:
            records = self.backend.read_all(
                self.tenant_id, "checkpoint", thread, None if ns is None else str(ns)
            )
            records.sort(key=lambda r: (r[0][3], r[0][4]), reverse=True)
            records.sort(key=lambda r: r[0][3])  # namespaces in order, newest first within
            for key, fields in records:
                checkpoint_id = key[4]
                if wanted_id and checkpoint_id != wanted_id:
                    continue
                if before_id and checkpoint_id >= before_id:
                    continue
                if filter:
                    metadata = self._metadata(fields)
                    if not all(metadata.get(k) == v for k, v in filter.items()):
                        continue
                if remaining is not None:
                    if remaining <= 0:
                        return
                    remaining -= 1
                yield self._tuple(thread, key[3], checkpoint_id, fields)

    def _metadata(self, fields: Fields) -> CheckpointMetadata:
        metadata: CheckpointMetadata = self.serde.loads_typed(
            typed_value(fields["metadata"], "checkpoint metadata")
        )
        return metadata

    def _tuple(self, thread: str, ns: str, checkpoint_id: str, fields: Fields) -> CheckpointTuple:
        where = f"checkpoint {self.tenant_id}/{thread}/{ns!r}/{checkpoint_id}"
        checkpoint: Checkpoint = self.serde.loads_typed(typed_value(fields["checkpoint"], where))
        checkpoint["channel_values"] = self._channel_values(
            thread, ns, checkpoint["channel_versions"]
        )
        parent = fields.get("parent")
        return CheckpointTuple(
            config=_config(thread, ns, checkpoint_id),
            checkpoint=checkpoint,
            metadata=self._metadata(fields),
            parent_config=_config(thread, ns, str(parent)) if parent else None,
            pending_writes=self._pending_writes(thread, ns, checkpoint_id),
        )

    def _channel_values(self, thread: str, ns: str, versions: ChannelVersions) -> dict[str, Any]:
        keys = {
            channel: self._key(thread, "blob", ns, channel, str(version))
            for channel, version in versions.items()
        }
        stored = self.backend.read_many(list(keys.values()))
        values: dict[str, Any] = {}
        for channel, key in keys.items():
            fields = stored.get(key)
            if fields is None:
                continue
            typed = typed_value(fields["value"], f"channel {channel!r} of thread {thread}")
            if typed[0] != EMPTY:
                values[channel] = self.serde.loads_typed(typed)
        return values

    def _pending_writes(self, thread: str, ns: str, checkpoint_id: str) -> Writes:
        records = self.backend.read_all(self.tenant_id, "write", thread, ns, checkpoint_id)
        ordered = sorted(
            (f for _, f in records),
            key=lambda f: writes_sort_key(str(f["taskPath"]), str(f["taskId"]), int(f["idx"])),
        )
        return [
            (
                str(f["taskId"]),
                str(f["channel"]),
                self.serde.loads_typed(typed_value(f["value"], f"write of thread {thread}")),
            )
            for f in ordered
        ]

    # --- writing ------------------------------------------------------------------------------
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf, thread, ns = _scope(config)
        body: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = body.pop("channel_values", {})
        rows: Rows = []
        for channel, version in new_versions.items():
            typed = self.serde.dumps_typed(values[channel]) if channel in values else (EMPTY, b"")
            key = self._key(thread, "blob", ns, channel, str(version))
            rows.append(Row(key, seal_record(key, {"value": typed_json(typed)})))
        full_metadata = get_checkpoint_metadata(config, metadata)
        key = self._key(thread, "checkpoint", ns, checkpoint["id"])
        fields = {
            "checkpoint": typed_json(self.serde.dumps_typed(body)),
            "metadata": typed_json(self.serde.dumps_typed(full_metadata)),
            "parent": conf.get("checkpoint_id"),
            "runId": _text_or_none(full_metadata.get("run_id")),
            # In plain view (the metadata is the serializer's bytes), so an erasure finds the
            # threads of a runtrail run without LangGraph (CheckpointBackend.threads_holding).
            "runtrailRun": _text_or_none(full_metadata.get(RUNTRAIL_RUN)),
        }
        rows.append(Row(key, seal_record(key, fields)))  # last: it makes the blobs reachable
        self.backend.put(rows)
        return _config(thread, ns, checkpoint["id"])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf, thread, ns = _scope(config)
        checkpoint_id = conf.get("checkpoint_id")
        if not checkpoint_id:
            raise ValueError(f"put_writes on thread {thread!r} needs configurable.checkpoint_id")
        rows: Rows = []
        for index, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, index)
            key = self._key(thread, "write", ns, str(checkpoint_id), task_id, str(idx))
            fields = {
                "taskId": task_id,
                "idx": idx,
                "channel": channel,
                "value": typed_json(self.serde.dumps_typed(value)),
                "taskPath": task_path,
            }
            # A task's regular writes are stored once (a retried task keeps the first); its
            # special writes (error, interrupt, resume…) replace the previous ones.
            rows.append(Row(key, seal_record(key, fields), replace=idx < 0))
        self.backend.put(rows)

    def delete_thread(self, thread_id: str) -> None:
        self.backend.delete_thread(self.tenant_id, str(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        doomed = {str(r) for r in run_ids}
        if not doomed:
            return
        for thread in self.backend.threads(self.tenant_id):
            keys: Keys = []
            for key, fields in self.backend.read_all(self.tenant_id, "checkpoint", thread):
                if fields.get("runId") in doomed:
                    keys.extend(self._checkpoint_and_writes(key))
            self.backend.delete(keys)

    def _checkpoint_and_writes(self, key: Key) -> Keys:
        tenant, thread, _, ns, checkpoint_id, _, _ = key
        writes = self.backend.read_all(tenant, "write", thread, ns, checkpoint_id)
        return [key, *(k for k, _ in writes)]

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source, target = str(source_thread_id), str(target_thread_id)
        rows: Rows = []
        for kind in ("blob", "write", "checkpoint"):  # checkpoints last, as in put
            for key, fields in self.backend.read_all(self.tenant_id, kind, source):
                new_key: Key = (key[0], target, key[2], key[3], key[4], key[5], key[6])
                rows.append(Row(new_key, seal_record(new_key, fields)))
        self.backend.put(rows)

    def prune(
        self, thread_ids: Sequence[str], *, strategy: str = "keep_latest", keep: int = 1
    ) -> None:
        """LangGraph's prune; ``keep``: how many of the latest checkpoints ``keep_latest``
        keeps per namespace (retention's "latest N per thread")."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: keep_latest or delete")
        if keep < 1:
            raise ValueError("keep at least the latest checkpoint")
        for thread in (str(t) for t in thread_ids):
            if strategy == "delete":
                self.backend.delete_thread(self.tenant_id, thread)
                continue
            records = self.backend.read_all(self.tenant_id, "checkpoint", thread)
            by_ns: dict[str, list[Key]] = {}
            for key, _ in records:
                by_ns.setdefault(key[3], []).append(key)
            kept = {k for keys in by_ns.values() for k in sorted(keys, key=lambda k: k[4])[-keep:]}
            doomed: Keys = []
            for key, _ in records:
                if key not in kept:
                    doomed.extend(self._checkpoint_and_writes(key))
            # Channel values stay: a kept checkpoint may read values written many steps ago.
            self.backend.delete(doomed)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Versions that sort as text (a counter, then a random tie-break), as LangGraph's own
        savers make them, so they can be stored as key parts."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # --- async: the same calls, off the event loop ------------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


def _scope(config: RunnableConfig) -> tuple[dict[str, Any], str, str]:
    """The configurable part of ``config``, its thread ID and namespace; a clear error when the
    thread ID is missing (LangGraph checks this for graphs, not for direct calls)."""
    conf: dict[str, Any] = dict(config.get("configurable") or {})
    thread = conf.get("thread_id")
    if thread is None or str(thread) == "":
        raise ValueError(
            "a checkpoint config needs configurable.thread_id, e.g. "
            "{'configurable': {'thread_id': 'order-42'}}"
        )
    return conf, str(thread), str(conf.get("checkpoint_ns") or "")


def _config(thread: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)
