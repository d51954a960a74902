"""The JSON object of a record dataclass: its fields under camelCase keys, in declaration order.

Why one function: the resume cache's entries, the audit's run heads and the resume report are
read back by their JSON keys (by other processes, by the explorer, by ``from_json``), and those
keys are the field names in camelCase. Spelling each map by hand let a key drift from its
field; deriving it keeps every such record's wire form and its fields the same list.
"""

from __future__ import annotations

from dataclasses import fields
from functools import cache
from typing import TYPE_CHECKING, Any

from pydantic.alias_generators import to_camel

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


@cache
def _keys(cls: type[DataclassInstance]) -> tuple[tuple[str, str], ...]:
    """(field name, JSON key) of each field of ``cls``, computed once per class."""
    return tuple((f.name, to_camel(f.name)) for f in fields(cls))


def camel_fields(record: DataclassInstance, **values: Any) -> dict[str, Any]:
    """Every field of ``record`` under its camelCase key; ``values`` give the JSON value of
    the fields that are not JSON as they stand (an enum, nested records), by field name."""
    return {
        key: values[name] if name in values else getattr(record, name)
        for name, key in _keys(type(record))
    }
