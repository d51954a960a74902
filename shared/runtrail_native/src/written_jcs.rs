//! RFC 8785 (JCS) bytes of an event's JSON form *as written*, straight from its Avro body:
//! what the audit hashes and stores for every event, which was the written form built as
//! Python dicts (its JSON-text fields parsed by orjson), then walked and serialised again.
//!
//! The written form is the Avro record with `sequence` as a base-10 string and each JSON-text
//! field of `data` parsed (`EventCodec.decode_written`). Like the other interpreters this
//! writes only what it can write exactly and answers None otherwise (the caller then
//! canonicalises the Python form, whose answer or error stands): a body that does not parse
//! to its end, text that is not UTF-8, a record whose `type` or `schemaVersion` is not its
//! schema's, integers beyond ±2^53, doubles outside `json_canonical::write_f64`'s exact range,
//! JSON text serde_json refuses (a lone surrogate, nesting past its limit of 128) and object
//! keys beyond the Basic Multilingual Plane (there UTF-16 order, RFC 8785's, is not UTF-8's).
//! Avro field names are ASCII, so their order is fixed once per schema.

use std::io::Write;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use serde_json::Value;

use crate::json_canonical::{write_f64, write_str, SAFE};
use crate::{read_bytes, read_long, union_branch};

/// How one value of the body is written.
pub(crate) enum Written {
    Null,
    Boolean,
    Int,
    Long,
    Double,
    Str,
    /// a string holding JSON text (a JSON-text field of `data`): parsed, then written
    JsonText,
    /// the envelope's `sequence`: a long written as a decimal string
    Sequence,
    /// the envelope's `type`: a string that must be this one
    TypeIs(Vec<u8>),
    /// the envelope's `schemaVersion`: an int or long that must be this one
    VersionIs(i64),
    Union(Vec<Written>),
    /// fields in the body's order, and (field index, `"name":`) in RFC 8785 order
    Record {
        fields: Vec<Written>,
        order: Vec<(usize, Vec<u8>)>,
    },
}

/// What a field of a record is, beyond its Avro type.
#[derive(Clone, Copy, PartialEq)]
enum Role {
    Plain,
    /// a field of the envelope (the root record)
    Envelope,
    /// a field of `data`
    Data,
}

/// The plan of a writer schema from its reader plan (`runtrail.events.native.avro_program`).
pub(crate) fn plan(
    program: &Bound<'_, PyAny>,
    event_type: &str,
    version: i64,
    json_fields: &[String],
) -> PyResult<Written> {
    let expect = Expect {
        event_type,
        version,
        json_fields,
    };
    node(program, Role::Envelope, &expect)
}

struct Expect<'a> {
    event_type: &'a str,
    version: i64,
    json_fields: &'a [String],
}

fn kind_of(node: &Bound<'_, PyAny>) -> PyResult<String> {
    node.downcast::<PyTuple>()?.get_item(0)?.extract()
}

/// A field's plan: what its name means at its record's level, else its Avro type's.
fn field(
    name: &str,
    node_: &Bound<'_, PyAny>,
    within: Role,
    expect: &Expect<'_>,
) -> PyResult<Written> {
    let unsupported = || PyValueError::new_err(format!("no written-form plan for field {name}"));
    match (within, name) {
        (Role::Envelope, "sequence") => match kind_of(node_)?.as_str() {
            "long" | "int" => Ok(Written::Sequence),
            _ => Err(unsupported()),
        },
        (Role::Envelope, "type") => match kind_of(node_)?.as_str() {
            "string" => Ok(Written::TypeIs(expect.event_type.as_bytes().to_vec())),
            _ => Err(unsupported()),
        },
        (Role::Envelope, "schemaVersion") => match kind_of(node_)?.as_str() {
            "long" | "int" => Ok(Written::VersionIs(expect.version)),
            _ => Err(unsupported()),
        },
        (Role::Envelope, "data") => node(node_, Role::Data, expect),
        (Role::Data, _) if expect.json_fields.iter().any(|f| f == name) => json_text(node_),
        _ => node(node_, Role::Plain, expect),
    }
}

/// A JSON-text field: a string, or a union of null and a string.
fn json_text(node_: &Bound<'_, PyAny>) -> PyResult<Written> {
    let parts = node_.downcast::<PyTuple>()?;
    match kind_of(node_)?.as_str() {
        "string" => Ok(Written::JsonText),
        "union" => {
            let mut out = Vec::new();
            for b in parts.get_item(1)?.try_iter()? {
                out.push(match kind_of(&b?)?.as_str() {
                    "null" => Written::Null,
                    "string" => Written::JsonText,
                    other => {
                        return Err(PyValueError::new_err(format!("JSON text in Avro {other}")))
                    }
                });
            }
            Ok(Written::Union(out))
        }
        other => Err(PyValueError::new_err(format!("JSON text in Avro {other}"))),
    }
}

/// A node of the reader plan; `fields_role` is what the fields of a record here are.
fn node(node_: &Bound<'_, PyAny>, fields_role: Role, expect: &Expect<'_>) -> PyResult<Written> {
    let parts = node_.downcast::<PyTuple>()?;
    Ok(match kind_of(node_)?.as_str() {
        "null" => Written::Null,
        "boolean" => Written::Boolean,
        "int" => Written::Int,
        "long" => Written::Long,
        "double" => Written::Double,
        "string" => Written::Str,
        "union" => {
            let mut out = Vec::new();
            for b in parts.get_item(1)?.try_iter()? {
                out.push(node(&b?, Role::Plain, expect)?);
            }
            Written::Union(out)
        }
        "record" => {
            let mut fields = Vec::new();
            let mut names = Vec::new();
            for f in parts.get_item(1)?.try_iter()? {
                let f = f?;
                let pair = f.downcast::<PyTuple>()?;
                let name: String = pair.get_item(0)?.extract()?;
                if !name.is_ascii() {
                    return Err(PyValueError::new_err(format!("field name {name:?}")));
                }
                fields.push(field(&name, &pair.get_item(1)?, fields_role, expect)?);
                names.push(name);
            }
            let mut order: Vec<(usize, Vec<u8>)> = names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let mut key = Vec::new();
                    write_str(name, &mut key);
                    key.push(b':');
                    (i, key)
                })
                .collect();
            order.sort_by(|a, b| names[a.0].as_bytes().cmp(names[b.0].as_bytes()));
            Written::Record { fields, order }
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "no written-form plan for Avro {other}"
            )))
        }
    })
}

/// Write one value of the body; None when the caller must decide.
pub(crate) fn write(
    py: Python<'_>,
    w: &Written,
    b: &[u8],
    p: &mut usize,
    out: &mut Vec<u8>,
) -> PyResult<Option<()>> {
    let safe = |n: i64| -SAFE < n && n < SAFE;
    match w {
        Written::Null => out.extend_from_slice(b"null"),
        Written::Boolean => {
            match b.get(*p) {
                Some(0) => out.extend_from_slice(b"false"),
                Some(1) => out.extend_from_slice(b"true"),
                _ => return Ok(None),
            }
            *p += 1;
        }
        Written::Int | Written::Long => {
            let Some(n) = read_long(b, p) else {
                return Ok(None);
            };
            let int_ok = matches!(w, Written::Long) || i32::try_from(n).is_ok();
            if !int_ok || !safe(n) {
                return Ok(None);
            }
            let _ = write!(out, "{n}");
        }
        Written::Double => {
            let Some(raw) = p.checked_add(8).and_then(|end| b.get(*p..end)) else {
                return Ok(None);
            };
            let f = f64::from_le_bytes(raw.try_into().expect("8 bytes"));
            *p += 8;
            if !write_f64(py, f, out)? {
                return Ok(None);
            }
        }
        Written::Str => {
            let Some(text) = read_bytes(b, p).and_then(|t| std::str::from_utf8(t).ok()) else {
                return Ok(None);
            };
            write_str(text, out);
        }
        Written::JsonText => {
            let Some(text) = read_bytes(b, p) else {
                return Ok(None);
            };
            let Ok(value) = serde_json::from_slice::<Value>(text) else {
                return Ok(None);
            };
            if !write_json(py, &value, out)? {
                return Ok(None);
            }
        }
        Written::Sequence => {
            let Some(n) = read_long(b, p) else {
                return Ok(None);
            };
            let _ = write!(out, "\"{n}\"");
        }
        Written::TypeIs(expected) => match read_bytes(b, p) {
            Some(text) if text == expected.as_slice() => {
                // the schema's own type name, valid UTF-8 by construction
                write_str(std::str::from_utf8(text).expect("a type name"), out)
            }
            _ => return Ok(None),
        },
        Written::VersionIs(expected) => match read_long(b, p) {
            Some(n) if n == *expected => {
                let _ = write!(out, "{n}");
            }
            _ => return Ok(None),
        },
        Written::Union(branches) => {
            let Some(branch) = union_branch(branches, b, p) else {
                return Ok(None);
            };
            return write(py, branch, b, p, out);
        }
        Written::Record { fields, order } => {
            let mut scratch = Vec::with_capacity(128);
            let mut spans = Vec::with_capacity(fields.len());
            for f in fields {
                let start = scratch.len();
                if write(py, f, b, p, &mut scratch)?.is_none() {
                    return Ok(None);
                }
                spans.push((start, scratch.len()));
            }
            out.push(b'{');
            for (n, (i, key)) in order.iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(key);
                let (start, end) = spans[*i];
                out.extend_from_slice(&scratch[start..end]);
            }
            out.push(b'}');
        }
    }
    Ok(Some(()))
}

/// A parsed JSON value; false when the caller must decide. serde_json's objects are sorted
/// by key bytes (the last of duplicate keys kept, as orjson keeps it), which is RFC 8785's
/// order for keys within the Basic Multilingual Plane.
fn write_json(py: Python<'_>, v: &Value, out: &mut Vec<u8>) -> PyResult<bool> {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(x) => out.extend_from_slice(if *x { b"true" } else { b"false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                if !(-SAFE < i && i < SAFE) {
                    return Ok(false);
                }
                let _ = write!(out, "{i}");
            } else if n.is_u64() {
                return Ok(false); // beyond 2^63: beyond 2^53
            } else {
                let Some(f) = n.as_f64() else {
                    return Ok(false);
                };
                return write_f64(py, f, out);
            }
        }
        Value::String(s) => write_str(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                if !write_json(py, item, out)? {
                    return Ok(false);
                }
            }
            out.push(b']');
        }
        Value::Object(members) => {
            out.push(b'{');
            for (i, (key, item)) in members.iter().enumerate() {
                if key.as_bytes().iter().any(|&c| c >= 0xF0) {
                    return Ok(false); // beyond the BMP: UTF-16 order differs from UTF-8's
                }
                if i > 0 {
                    out.push(b',');
                }
                write_str(key, out);
                out.push(b':');
                if !write_json(py, item, out)? {
                    return Ok(false);
                }
            }
            out.push(b'}');
        }
    }
    Ok(true)
}
