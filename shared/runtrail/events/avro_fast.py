"""Per-schema generated Avro binary decoder and encoder, exact with fastavro by construction.

fastavro interprets the schema for every value; a decoder and an encoder generated once per
writer schema (straight-line Python, nested records inlined) do the same work in about half
the time. Exactness is kept in two ways:

- The generated code only accepts what it is sure of: canonical varints within range, booleans
  0/1, in-range union and enum indexes, valid UTF-8; on the encoding side, plain Python types
  (``str``, ``int``, ``float``, ``bool``, ``bytes``, ``list``, ``dict``, ``None``) with exactly
  the fields of the record. Anything else raises, and :class:`FastCodec` then runs fastavro
  itself, so an odd input gets fastavro's answer (its value or its error), never a third one.
- The tests compare both on every fixture and on random records of every schema.

Logical types are not generated (fastavro converts them): :func:`compile_schema` raises
:class:`Unsupported` and the caller keeps fastavro for that schema.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from typing import Any

from fastavro import schemaless_reader, schemaless_writer

from runtrail.events import native

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
_PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))
_PLAIN = frozenset((type(None), bool, int, float, str, bytes, list, dict))

Decoder = Callable[[bytes, int], tuple[Any, int]]
Encoder = Callable[[bytearray, Any], None]


class Unsupported(Exception):
    """The schema uses something the generator does not produce code for."""


class Bad(Exception):
    """Raised by generated code on anything it is not sure of; the caller falls back."""


# --- varints, shared by the generated code ---------------------------------------------------
def read_long(b: bytes, p: int) -> tuple[int, int]:
    """A zig-zag varint of at most 10 bytes holding a 64-bit value."""
    n = 0
    shift = 0
    while True:
        x = b[p]
        p += 1
        n |= (x & 0x7F) << shift
        if not x & 0x80:
            break
        shift += 7
        if shift > 63:
            raise Bad("varint longer than 10 bytes")
    if n >> 64:
        raise Bad("varint over 64 bits")
    return (n >> 1) ^ -(n & 1), p


def read_int(b: bytes, p: int) -> tuple[int, int]:
    v, p = read_long(b, p)
    if not INT_MIN <= v <= INT_MAX:
        raise Bad("int out of range")
    return v, p


def write_long(o: bytearray, v: int) -> None:
    if not LONG_MIN <= v <= LONG_MAX:
        raise Bad("long out of range")
    z = (v << 1) ^ (v >> 63)
    while z > 0x7F:
        o.append((z & 0x7F) | 0x80)
        z >>= 7
    o.append(z)


def write_int(o: bytearray, v: int) -> None:
    if not INT_MIN <= v <= INT_MAX:
        raise Bad("int out of range")
    write_long(o, v)


# --- union branch choice on the encoding side: fastavro's rule, on plain types only ----------
class _Validator:
    """fastavro's ``validate`` for plain Python values; raises :class:`Bad` when unsure."""

    def __init__(self, named: dict[str, Any]) -> None:
        self._named = named

    def ok(self, v: Any, s: Any) -> bool:
        if type(v) not in _PLAIN:
            raise Bad("not a plain value")
        if isinstance(s, str):
            if s in _PRIMITIVES:
                return self._primitive(v, s)
            return self.ok(v, self._named[s])
        if isinstance(s, list):
            return any(self.ok(v, branch) for branch in s)
        kind = s["type"]
        if kind in _PRIMITIVES:
            return self._primitive(v, kind)
        if kind == "enum":
            return type(v) is str and v in s["symbols"]
        if kind == "fixed":
            return type(v) is bytes and len(v) == s["size"]
        if kind == "array":
            return type(v) is list and all(self.ok(x, s["items"]) for x in v)
        if kind == "map":
            if type(v) is not dict:
                return False
            if any(type(k) is not str for k in v):
                raise Bad("map key not a str")
            return all(self.ok(x, s["values"]) for x in v.values())
        if kind == "record":
            if type(v) is not dict:
                return False
            if "-type" in v:
                raise Bad("record names a type")
            for f in s["fields"]:
                if f["name"] in v:
                    if not self.ok(v[f["name"]], f["type"]):
                        return False
                elif "default" not in f or not self.ok(f["default"], f["type"]):
                    return False
            return True
        raise Bad(f"unknown kind {kind}")

    @staticmethod
    def _primitive(v: Any, kind: str) -> bool:
        t = type(v)
        if kind == "null":
            return v is None
        if kind == "boolean":
            return t is bool
        if kind == "int":
            return t is int and INT_MIN <= v <= INT_MAX
        if kind == "long":
            return t is int and LONG_MIN <= v <= LONG_MAX
        if kind in ("float", "double"):
            return t is int or t is float
        if kind == "string":
            return t is str
        return t is bytes  # bytes


class _UnionChooser:
    """The branch fastavro's ``write_union`` picks for a value."""

    def __init__(self, branches: list[Any], named: dict[str, Any], validator: _Validator):
        self._branches = [self._resolve(b, named) for b in branches]
        self._validator = validator

    @staticmethod
    def _resolve(s: Any, named: dict[str, Any]) -> Any:
        return named[s] if isinstance(s, str) and s not in _PRIMITIVES else s

    @staticmethod
    def _kind(s: Any) -> str:
        return s if isinstance(s, str) else str(s["type"])

    def __call__(self, v: Any) -> int:
        if type(v) is tuple:
            raise Bad("tuple notation")
        best, most = -1, -1
        could_be_float = False
        for i, s in enumerate(self._branches):
            kind = self._kind(s)
            if could_be_float:
                if kind == "double":
                    return i
                continue
            if not self._validator.ok(v, s):
                continue
            if kind == "record":
                fields = len({f["name"] for f in s["fields"]} & set(v))
                if fields > most:
                    best, most = i, fields
            elif kind == "float":
                best = i
                could_be_float = True
            else:
                return i
        if best < 0:
            raise Bad("no branch")
        return best


# --- code generation ---------------------------------------------------------------------------
class _Gen:
    """Emits the decoder and encoder source of one schema."""

    def __init__(self, parsed: Any) -> None:
        self.named: dict[str, Any] = {}
        self.consts: dict[str, Any] = {
            "Bad": Bad,
            "read_long": read_long,
            "read_int": read_int,
            "write_long": write_long,
            "write_int": write_int,
            "unpack_d": struct.Struct("<d").unpack_from,
            "unpack_f": struct.Struct("<f").unpack_from,
            "pack_d": struct.Struct("<d").pack,
            "pack_f": struct.Struct("<f").pack,
        }
        self._n = 0
        self._collect(parsed)
        self._validator = _Validator(self.named)
        self.functions: list[str] = []
        self._done: set[str] = set()

    def _collect(self, s: Any) -> None:
        if isinstance(s, list):
            for b in s:
                self._collect(b)
        elif isinstance(s, dict):
            if "logicalType" in s:
                raise Unsupported(f"logical type {s['logicalType']}")
            kind = s["type"]
            if kind in ("record", "error", "enum", "fixed"):
                self.named[s["name"]] = s
            if kind in ("record", "error"):
                for f in s["fields"]:
                    self._collect(f["type"])
            elif kind == "array":
                self._collect(s["items"])
            elif kind == "map":
                self._collect(s["values"])
            elif kind not in ("enum", "fixed") and kind not in _PRIMITIVES:
                raise Unsupported(f"type {kind}")
        elif isinstance(s, str) and s not in _PRIMITIVES and s not in self.named:
            raise Unsupported(f"unknown name {s}")

    def var(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def const(self, value: Any) -> str:
        name = self.var("K")
        self.consts[name] = value
        return name

    def resolve(self, s: Any) -> Any:
        if isinstance(s, str) and s not in _PRIMITIVES:
            return self.named[s]
        return s

    # --- decoding --------------------------------------------------------------------------
    def dec(self, s: Any, out: str, lines: list[str], ind: str, stack: tuple[str, ...]) -> None:
        """Lines that read one value of schema ``s`` from ``b`` at ``p`` into ``out``."""
        s = self.resolve(s)
        if isinstance(s, list):
            self._dec_union(s, out, lines, ind, stack)
            return
        kind = s if isinstance(s, str) else s["type"]
        w = lines.append
        if kind == "null":
            w(f"{ind}{out} = None")
        elif kind == "boolean":
            w(f"{ind}{out} = b[p]")
            w(f"{ind}p += 1")
            w(f"{ind}if {out} > 1: raise Bad('boolean byte')")
            w(f"{ind}{out} = {out} == 1")
        elif kind in ("int", "long"):
            self._dec_varint(out, lines, ind, kind)
        elif kind == "double":
            w(f"{ind}{out} = unpack_d(b, p)[0]")
            w(f"{ind}p += 8")
        elif kind == "float":
            w(f"{ind}{out} = unpack_f(b, p)[0]")
            w(f"{ind}p += 4")
        elif kind in ("string", "bytes"):
            n = self.var("n")
            self._dec_varint(n, lines, ind, "long")
            e = self.var("e")
            w(f"{ind}{e} = p + {n}")
            w(f"{ind}if {n} < 0 or {e} > L: raise Bad('length')")
            tail = ".decode()" if kind == "string" else ""
            w(f"{ind}{out} = b[p:{e}]{tail}")
            w(f"{ind}p = {e}")
        elif kind == "fixed":
            e = self.var("e")
            w(f"{ind}{e} = p + {int(s['size'])}")
            w(f"{ind}if {e} > L: raise Bad('length')")
            w(f"{ind}{out} = b[p:{e}]")
            w(f"{ind}p = {e}")
        elif kind == "enum":
            i = self.var("i")
            symbols = self.const(tuple(s["symbols"]))
            self._dec_varint(i, lines, ind, "long")
            w(f"{ind}if not 0 <= {i} < {len(s['symbols'])}: raise Bad('enum index')")
            w(f"{ind}{out} = {symbols}[{i}]")
        elif kind in ("array", "map"):
            self._dec_blocks(s, kind, out, lines, ind, stack)
        elif kind in ("record", "error"):
            self._dec_record(s, out, lines, ind, stack)
        else:
            raise Unsupported(f"type {kind}")

    def _dec_varint(self, out: str, lines: list[str], ind: str, kind: str) -> None:
        w = lines.append
        w(f"{ind}{out} = b[p]")
        w(f"{ind}if {out} < 0x80:")
        w(f"{ind}    p += 1")
        w(f"{ind}    {out} = ({out} >> 1) ^ -({out} & 1)")
        w(f"{ind}else:")
        w(f"{ind}    {out}, p = read_{kind}(b, p)")

    def _dec_blocks(
        self, s: Any, kind: str, out: str, lines: list[str], ind: str, stack: tuple[str, ...]
    ) -> None:
        w = lines.append
        n, item = self.var("n"), self.var("x")
        w(f"{ind}{out} = {'[]' if kind == 'array' else '{}'}")
        self._dec_varint(n, lines, ind, "long")
        w(f"{ind}while {n}:")
        w(f"{ind}    if {n} < 0:")
        w(f"{ind}        {n} = -{n}")
        size = self.var("z")
        self._dec_varint(size, lines, ind + "        ", "long")
        w(f"{ind}    for _ in range({n}):")
        inner = ind + "        "
        if kind == "array":
            self.dec(s["items"], item, lines, inner, stack)
            w(f"{inner}{out}.append({item})")
        else:
            key = self.var("k")
            self.dec("string", key, lines, inner, stack)
            self.dec(s["values"], item, lines, inner, stack)
            w(f"{inner}{out}[{key}] = {item}")
        self._dec_varint(n, lines, ind + "    ", "long")

    def _dec_union(
        self, s: list[Any], out: str, lines: list[str], ind: str, stack: tuple[str, ...]
    ) -> None:
        w = lines.append
        i = self.var("u")
        # the index as its one-byte varint (zig-zag 2n); a longer form is left to fastavro
        w(f"{ind}{i} = b[p]")
        w(f"{ind}p += 1")
        for index, branch in enumerate(s):
            w(f"{ind}{'if' if index == 0 else 'elif'} {i} == {2 * index}:")
            self.dec(branch, out, lines, ind + "    ", stack)
        w(f"{ind}else:")
        w(f"{ind}    raise Bad('union index')")

    def _dec_record(
        self, s: Any, out: str, lines: list[str], ind: str, stack: tuple[str, ...]
    ) -> None:
        name = s["name"]
        if name in stack:  # recursive: a function of its own
            fn = self._record_function(s, "d")
            lines.append(f"{ind}{out}, p = {fn}(b, p, L)")
            return
        parts = []
        for f in s["fields"]:
            v = self.var("v")
            self.dec(f["type"], v, lines, ind, (*stack, name))
            parts.append(f"{f['name']!r}: {v}")
        lines.append(f"{ind}{out} = {{{', '.join(parts)}}}")

    def _record_function(self, s: Any, side: str) -> str:
        fn = f"_{side}_" + "".join(c if c.isalnum() else "_" for c in s["name"])
        if fn + side in self._done:
            return fn
        self._done.add(fn + side)
        lines: list[str] = []
        if side == "d":
            lines.append(f"def {fn}(b, p, L):")
            self._dec_record_body(s, lines)
        else:
            lines.append(f"def {fn}(o, r):")
            self._enc_record_body(s, "r", lines)
        self.functions.append("\n".join(lines))
        return fn

    def _dec_record_body(self, s: Any, lines: list[str]) -> None:
        parts = []
        for f in s["fields"]:
            v = self.var("v")
            self.dec(f["type"], v, lines, "    ", (s["name"],))
            parts.append(f"{f['name']!r}: {v}")
        lines.append(f"    return {{{', '.join(parts)}}}, p")

    # --- encoding --------------------------------------------------------------------------
    def enc(
        self,
        s: Any,
        val: str,
        lines: list[str],
        ind: str,
        stack: tuple[str, ...],
    ) -> None:
        """Lines that append the encoding of ``val`` (schema ``s``) to ``o``."""
        s = self.resolve(s)
        if isinstance(s, list):
            self._enc_union(s, val, lines, ind, stack)
            return
        kind = s if isinstance(s, str) else s["type"]
        w = lines.append
        if kind == "null":
            w(f"{ind}if {val} is not None: raise Bad('not null')")
        elif kind == "boolean":
            w(f"{ind}if {val} is True: o.append(1)")
            w(f"{ind}elif {val} is False: o.append(0)")
            w(f"{ind}else: raise Bad('not a bool')")
        elif kind in ("int", "long"):
            w(f"{ind}if type({val}) is not int: raise Bad('not an int')")
            w(f"{ind}if -64 <= {val} < 64: o.append(({val} << 1) ^ ({val} >> 63))")
            w(f"{ind}else: write_{kind}(o, {val})")
        elif kind in ("double", "float"):
            pack = "pack_d" if kind == "double" else "pack_f"
            w(f"{ind}if type({val}) is float: o += {pack}({val})")
            w(f"{ind}elif type({val}) is int: o += {pack}(float({val}))")
            w(f"{ind}else: raise Bad('not a number')")
        elif kind in ("string", "bytes"):
            if kind == "string":
                w(f"{ind}if type({val}) is not str: raise Bad('not a str')")
                e = self.var("t")
                w(f"{ind}{e} = {val}.encode()")
            else:
                w(f"{ind}if type({val}) is not bytes: raise Bad('not bytes')")
                e = val
            n = self.var("n")
            w(f"{ind}{n} = len({e})")
            w(f"{ind}if {n} < 64: o.append({n} << 1)")
            w(f"{ind}else: write_long(o, {n})")
            w(f"{ind}o += {e}")
        elif kind == "fixed":
            w(f"{ind}if type({val}) is not bytes or len({val}) != {int(s['size'])}:")
            w(f"{ind}    raise Bad('not fixed')")
            w(f"{ind}o += {val}")
        elif kind == "enum":
            index = self.const({sym: i for i, sym in enumerate(s["symbols"])})
            i = self.var("i")
            w(f"{ind}if type({val}) is not str: raise Bad('not a symbol')")
            w(f"{ind}{i} = {index}.get({val})")
            w(f"{ind}if {i} is None: raise Bad('not a symbol')")
            w(f"{ind}write_long(o, {i})")
        elif kind == "array":
            x = self.var("x")
            w(f"{ind}if type({val}) is not list: raise Bad('not a list')")
            w(f"{ind}if {val}:")
            w(f"{ind}    write_long(o, len({val}))")
            w(f"{ind}    for {x} in {val}:")
            self.enc(s["items"], x, lines, ind + "        ", stack)
            w(f"{ind}o.append(0)")
        elif kind == "map":
            k, x = self.var("k"), self.var("x")
            w(f"{ind}if type({val}) is not dict: raise Bad('not a dict')")
            w(f"{ind}if {val}:")
            w(f"{ind}    write_long(o, len({val}))")
            w(f"{ind}    for {k}, {x} in {val}.items():")
            self.enc("string", k, lines, ind + "        ", stack)
            self.enc(s["values"], x, lines, ind + "        ", stack)
            w(f"{ind}o.append(0)")
        elif kind in ("record", "error"):
            if s["name"] in stack:
                fn = self._record_function(s, "e")
                w(f"{ind}{fn}(o, {val})")
            else:
                self._enc_record(s, val, lines, ind, (*stack, s["name"]))
        else:
            raise Unsupported(f"type {kind}")

    def _enc_record(
        self, s: Any, val: str, lines: list[str], ind: str, stack: tuple[str, ...]
    ) -> None:
        keys = self.const(frozenset(f["name"] for f in s["fields"]))
        w = lines.append
        w(f"{ind}if type({val}) is not dict or {val}.keys() != {keys}: raise Bad('fields')")
        for f in s["fields"]:
            v = self.var("v")
            w(f"{ind}{v} = {val}[{f['name']!r}]")
            self.enc(f["type"], v, lines, ind, stack)

    def _enc_record_body(self, s: Any, val: str, lines: list[str]) -> None:
        self._enc_record(s, val, lines, "    ", (s["name"],))

    def _enc_union(
        self, s: list[Any], val: str, lines: list[str], ind: str, stack: tuple[str, ...]
    ) -> None:
        w = lines.append
        simple = len(s) == 2 and "null" in s and not any(isinstance(b, list) for b in s)
        if simple:  # the common optional field: None is always the null branch
            null = s.index("null")
            other = s[1 - null]
            w(f"{ind}if {val} is None: o.append({2 * null})")
            w(f"{ind}else:")
            w(f"{ind}    o.append({2 * (1 - null)})")
            self.enc(other, val, lines, ind + "    ", stack)
            return
        chooser = self.const(_UnionChooser(s, self.named, self._validator))
        i = self.var("u")
        w(f"{ind}{i} = {chooser}({val})")
        w(f"{ind}o.append({i} << 1)" if len(s) < 64 else f"{ind}write_long(o, {i})")
        for index, branch in enumerate(s):
            w(f"{ind}{'if' if index == 0 else 'elif'} {i} == {index}:")
            self.enc(branch, val, lines, ind + "    ", stack)


def _generate(parsed: Any) -> tuple[Decoder, Encoder, str]:
    gen = _Gen(parsed)
    dec_lines = ["def decode(b, p):", "    L = len(b)"]
    gen.dec(parsed, "r", dec_lines, "    ", ())
    dec_lines.append("    return r, p")
    enc_lines = ["def encode(o, r):"]
    gen.enc(parsed, "r", enc_lines, "    ", ())
    source = "\n\n".join([*gen.functions, "\n".join(dec_lines), "\n".join(enc_lines)]) + "\n"
    namespace: dict[str, Any] = dict(gen.consts)
    exec(compile(source, "<avro_fast>", "exec"), namespace)
    return namespace["decode"], namespace["encode"], source


class FastCodec:
    """The generated decoder and encoder of one schema, with fastavro behind them, and the
    compiled reader and writer (:mod:`~runtrail.events.native`) in front of them when there
    are."""

    def __init__(self, parsed: Any, *, generate: bool = True) -> None:
        """``generate=False``: fastavro alone (a schema the generator does not support)."""
        self.parsed = parsed
        if generate:
            self.decode_fast, self.encode_fast, self.source = _generate(parsed)
        else:
            self.decode_fast, self.encode_fast, self.source = _refuse_decode, _refuse_encode, ""
        reader = native.avro_reader(parsed) if generate else None
        self.read_native: Callable[[bytes, int], tuple[Any, int] | None] | None = (
            reader.read if reader is not None else None
        )
        writer = native.avro_writer(parsed) if generate else None
        self.write_native: Callable[[Any, bytes], bytes | None] | None = (
            writer.write if writer is not None else None
        )

    def decode(self, value: bytes, pos: int = 0) -> tuple[Any, int]:
        """The record at ``value[pos:]`` and the position after it; the generated decoder
        when the compiled one is unsure, fastavro on anything odd."""
        if self.read_native is not None:
            read = self.read_native(value, pos)
            if read is not None:
                return read
        try:
            return self.decode_fast(value, pos)
        except Exception:
            body = io.BytesIO(value)
            body.seek(pos)
            record = schemaless_reader(body, self.parsed, None)
            return record, body.tell()

    def encode(self, record: Any, prefix: bytes = b"") -> bytes:
        """``prefix`` + the record's encoding; strict (no missing or extra fields), as
        fastavro's ``schemaless_writer(strict=True)``, which runs on anything odd. The
        compiled writer first, when there is one: it answers None where it is unsure."""
        if self.write_native is not None:
            written = self.write_native(record, prefix)
            if written is not None:
                return written
        out = bytearray(prefix)
        try:
            self.encode_fast(out, record)
        except Exception:
            buf = io.BytesIO()
            buf.write(prefix)
            schemaless_writer(buf, self.parsed, record, strict=True)
            return buf.getvalue()
        return bytes(out)


def _refuse_decode(b: bytes, p: int) -> tuple[Any, int]:
    raise Bad("no generated decoder")


def _refuse_encode(o: bytearray, r: Any) -> None:
    raise Bad("no generated encoder")


def compile_schema(parsed: Any) -> FastCodec:
    """A :class:`FastCodec` for a fastavro-parsed schema; :class:`Unsupported` if it cannot."""
    return FastCodec(parsed)


def codec_for(parsed: Any) -> FastCodec:
    """The generated codec, or fastavro alone behind the same API if the schema is unsupported."""
    try:
        return FastCodec(parsed)
    except Unsupported:
        return FastCodec(parsed, generate=False)
