"""Decoded events built without pydantic when a cheap check proves pydantic would accept them.

Why: on the consume path the writer schema already fixed every type (a string is a ``str``,
a long an ``int``), so what full validation adds is the few constraints Avro cannot express
(non-blank IDs, timestamp patterns, ``ge`` bounds, literal values) — yet it cost each event
more than its Avro decode (issue 15). Here each model is compiled, once, into a builder that
checks exactly those things and then fills the model's fields directly.

Safe by construction: a builder only *accepts* a value when every field has the exact Python
type pydantic would return unchanged and passes the same constraints; anything it is unsure
of (a model with validators, a union beyond ``X | None``, a key missing or extra, a value of
another type that pydantic might coerce, a string with a newline against an anchored
pattern) raises :class:`NotTrusted`, and the caller validates with pydantic as before — with
pydantic's own error message when the event is invalid. A builder may refuse what pydantic
accepts, never the reverse (``tests/test_trusted_events.py`` holds it against pydantic).
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union

import annotated_types
from pydantic import AliasChoices, BaseModel, StringConstraints

Check = Callable[[Any], Any]


class NotTrusted(Exception):
    """The cheap check cannot vouch for this value: validate it with pydantic."""


_NOT = NotTrusted()
_new = object.__new__
_set = object.__setattr__


def _refuse(_value: Any) -> Any:
    raise _NOT


def _passthrough(value: Any) -> Any:
    return value


def _key(name: str, info: Any) -> str | None:
    """The input key pydantic reads the field from (the first of its alias choices)."""
    alias = info.validation_alias
    if alias is None:
        return str(info.alias or name)
    if isinstance(alias, str):
        return alias
    if isinstance(alias, AliasChoices) and isinstance(alias.choices[0], str):
        return alias.choices[0]
    return None


def _model_validators(cls: type[BaseModel]) -> tuple[list[Check], list[Check]] | None:
    """The model's ``before`` and ``after`` validators as plain calls; None when it has
    validators of another kind (field, wrap, plain)."""
    d = cls.__pydantic_decorators__
    if d.validators or d.field_validators or d.root_validators:
        return None
    before: list[Check] = []
    after: list[Check] = []
    for decorator in d.model_validators.values():
        mode = decorator.info.mode
        if mode == "before" and isinstance(decorator.func, types.MethodType):
            before.append(decorator.func)  # a classmethod, bound: func(data)
        elif mode == "after" and isinstance(decorator.func, types.FunctionType):
            after.append(decorator.func)  # func(model)
        else:
            return None
    return before, after


_BUILDERS: dict[type[BaseModel], Check | None] = {}


def model_builder(cls: type[BaseModel]) -> Check | None:
    """The builder of ``cls`` (None when it cannot be checked cheaply: use pydantic)."""
    if cls in _BUILDERS:
        return _BUILDERS[cls]
    _BUILDERS[cls] = None  # a self-referencing model stays with pydantic
    builder = _compile_model(cls)
    _BUILDERS[cls] = builder
    return builder


def _compile_model(cls: type[BaseModel]) -> Check | None:
    config = cls.model_config
    validators = _model_validators(cls)
    if validators is None or config.get("extra") != "forbid" or config.get("strict"):
        return None
    before, after = validators
    fields: list[tuple[str, str, Check]] = []
    for name, info in cls.model_fields.items():
        key = _key(name, info)
        check = _value_check(info.annotation, list(info.metadata))
        if key is None or check is None:
            return None
        fields.append((name, key, check))
    keys = frozenset(key for _, key, _ in fields)
    if len(keys) != len(fields):
        return None
    names = frozenset(name for name, _, _ in fields)
    plan = tuple(fields)

    def build(value: Any) -> Any:
        if type(value) is not dict or value.keys() != keys:
            raise _NOT
        for validator in before:  # trusted only when it leaves the input as it is
            if _call(validator, value) is not value:
                raise _NOT
        values = {name: check(value[key]) for name, key, check in plan}
        model = _new(cls)
        _set(model, "__dict__", values)
        _set(model, "__pydantic_fields_set__", set(names))
        _set(model, "__pydantic_extra__", None)
        _set(model, "__pydantic_private__", None)
        for validator in after:  # one that refuses (or replaces) the model: pydantic decides
            if _call(validator, model) is not model:
                raise _NOT
        return model

    return build


def _call(validator: Check, value: Any) -> Any:
    try:
        return validator(value)
    except Exception:
        raise _NOT from None


def _value_check(annotation: Any, metadata: list[Any]) -> Check | None:
    """A check returning the value pydantic would return for ``annotation`` with
    ``metadata`` (or raising :class:`NotTrusted`); None when there is none."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *extra = typing.get_args(annotation)
        return _value_check(inner, [*metadata, *extra])
    metadata = [m for m in metadata if not isinstance(m, str)]  # markers (runtrail.json)
    if origin in (Union, types.UnionType):
        args = typing.get_args(annotation)
        if len(args) != 2 or type(None) not in args:
            return None
        # pydantic applies a nullable field's constraints to its non-null value
        inner_check = _value_check(next(a for a in args if a is not type(None)), metadata)
        if inner_check is None:
            return None
        return lambda value: None if value is None else inner_check(value)
    if annotation is Any:
        return _passthrough if not metadata else None
    if origin is Literal:
        choices = typing.get_args(annotation)
        kinds = frozenset(type(a) for a in choices)
        if metadata or not kinds <= {str, int, bool}:
            return None
        allowed = frozenset((type(a), a) for a in choices)

        def literal(value: Any) -> Any:
            if type(value) not in kinds or (type(value), value) not in allowed:
                raise _NOT
            return value

        return literal
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_builder(annotation) if not metadata else None
    if annotation is str:
        return _str_check(metadata)
    if annotation is int:
        return _number_check(int, metadata)
    if annotation is float:
        return _number_check(float, metadata)
    if annotation is bool:
        return _exact(bool) if not metadata else None
    return None


def _exact(kind: type) -> Check:
    def exact(value: Any) -> Any:
        if type(value) is not kind:
            raise _NOT
        return value

    return exact


def _str_check(metadata: list[Any]) -> Check | None:
    min_length, max_length, patterns = 0, None, []
    for m in metadata:
        if isinstance(m, StringConstraints):
            if m.strip_whitespace or m.to_upper or m.to_lower or m.strict or m.ascii_only:
                return None
            if m.min_length is not None:
                min_length = max(min_length, m.min_length)
            if m.max_length is not None:
                max_length = m.max_length
            if m.pattern is not None:
                patterns.append(re.compile(str(m.pattern)).search)
        elif isinstance(m, annotated_types.MinLen):
            min_length = max(min_length, m.min_length)
        elif isinstance(m, annotated_types.MaxLen):
            max_length = m.max_length
        else:
            return None

    def check(value: Any) -> Any:
        if type(value) is not str or len(value) < min_length:
            raise _NOT
        if max_length is not None and len(value) > max_length:
            raise _NOT
        if patterns:
            # Python's $ also matches before a final newline, Rust's (pydantic's) does not
            if "\n" in value:
                raise _NOT
            for search in patterns:
                if search(value) is None:
                    raise _NOT
        return value

    return check


Bound = Callable[[Any], bool]
_BOUNDS: dict[type, Callable[[Any], Bound]] = {
    annotated_types.Ge: lambda b: lambda v: bool(v >= b.ge),
    annotated_types.Gt: lambda b: lambda v: bool(v > b.gt),
    annotated_types.Le: lambda b: lambda v: bool(v <= b.le),
    annotated_types.Lt: lambda b: lambda v: bool(v < b.lt),
}


def _number_check(kind: type, metadata: list[Any]) -> Check | None:
    bounds: list[Bound] = []
    for m in metadata:
        make = _BOUNDS.get(type(m))
        if make is None:
            return None
        bounds.append(make(m))

    def check(value: Any) -> Any:
        if type(value) is not kind:
            if kind is int and type(value) is str and _DECIMAL(value):  # ``sequence``
                value = int(value)
            else:
                raise _NOT
        for ok in bounds:
            if not ok(value):
                raise _NOT
        return value

    return check


#: a canonical base-10 integer (what ``str(int)`` writes): pydantic parses it to that int
_DECIMAL = re.compile(r"-?(0|[1-9][0-9]{0,18})").fullmatch
