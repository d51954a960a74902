"""Node I/O capture (seed 000 §1, §2): pair runtime events into records, store and replay them.

:class:`NodePairer` turns the event stream into :class:`NodeIoRecord` s; sinks chosen by URL
(``open_store(CAPTURE_RECORDS, url)``) store them; :func:`read_records` reads them back once each; the replay
functions rebuild or re-invoke one node.

Each name below is imported from its module on first use (:mod:`runtrail.lazy_exports`): a
reader of records does not load the pairer, the replay and the event model, and a process
writing files never loads obstore (the ``s3`` extra), which :class:`ObjectStoreSink` needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtrail.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from runtrail.capture.file_sink import JsonlFileSink
    from runtrail.capture.holds import Hold
    from runtrail.capture.memory_sink import InMemoryIoCaptureSink
    from runtrail.capture.object_sink import ObjectStoreSink
    from runtrail.capture.pairer import NodePairer
    from runtrail.capture.reader import CaptureReadError, find_record, iter_records, read_records
    from runtrail.capture.record import (
        NODE_TYPES,
        NodeIoRecord,
        NodeType,
        derive_record_id,
        model_node_id,
        tool_node_id,
    )
    from runtrail.capture.repair import repair_file, repair_tree
    from runtrail.capture.replay import (
        MockModelResult,
        ModelClient,
        NotAPromptError,
        ReplayError,
        replay_model_live,
        replay_model_mock,
        replay_tool_live,
    )
    from runtrail.capture.sink import CaptureSink
    from runtrail.capture.tokens import parse_usage

__getattr__ = lazy_exports(
    __name__,
    {
        ".file_sink": ("JsonlFileSink",),
        ".holds": ("Hold",),
        ".memory_sink": ("InMemoryIoCaptureSink",),
        ".pairer": ("NodePairer",),
        ".reader": ("CaptureReadError", "find_record", "iter_records", "read_records"),
        ".record": (
            "NODE_TYPES",
            "NodeIoRecord",
            "NodeType",
            "derive_record_id",
            "model_node_id",
            "tool_node_id",
        ),
        ".repair": ("repair_file", "repair_tree"),
        ".replay": (
            "MockModelResult",
            "ModelClient",
            "NotAPromptError",
            "ReplayError",
            "replay_model_live",
            "replay_model_mock",
            "replay_tool_live",
        ),
        ".sink": ("CaptureSink",),
        ".tokens": ("parse_usage",),
        ".object_sink": ("ObjectStoreSink",),
    },
)

__all__ = [
    "NODE_TYPES",
    "CaptureReadError",
    "CaptureSink",
    "Hold",
    "InMemoryIoCaptureSink",
    "JsonlFileSink",
    "MockModelResult",
    "ModelClient",
    "NodeIoRecord",
    "NodePairer",
    "NodeType",
    "NotAPromptError",
    "ObjectStoreSink",
    "ReplayError",
    "derive_record_id",
    "find_record",
    "iter_records",
    "model_node_id",
    "parse_usage",
    "read_records",
    "repair_file",
    "repair_tree",
    "replay_model_live",
    "replay_model_mock",
    "replay_tool_live",
    "tool_node_id",
]
