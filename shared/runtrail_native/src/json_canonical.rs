//! RFC 8785 (JCS) bytes of a model instance's JSON form, written from the same plan as
//! [`crate::json_dump::JsonDumper`] without building the form: what a sessions service keeps
//! of each event, which was the form built, checked and dumped by orjson, then copied.
//!
//! It writes only what it can write exactly and answers None otherwise (the caller then
//! canonicalises the dumper's or pydantic's form, whose answer or error stands): strings
//! with a UTF-8 form, integers within ±2^53, floats that are integral within ±2^53 or
//! non-integral with a magnitude in [1e-4, 1e16) (there ECMAScript's Number-to-string and
//! Python's `repr` agree: the shortest digits that round-trip, the even one of two equally
//! near, in fixed notation; Rust's `Display` breaks such ties the other way, so it is not
//! used), object keys within the Basic
//! Multilingual Plane (where UTF-8 order is RFC 8785's UTF-16 order), dicts and lists no
//! deeper than [`DEPTH`].

use std::io::Write;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString};

use crate::json_dump::{Dump, DumpModel};

/// How deep a value of a field typed `Any` is written before the caller decides.
const DEPTH: usize = 200;
/// Integers JCS writes exactly (IEEE doubles' safe range), as the Python fast path bounds them.
pub(crate) const SAFE: i64 = 1 << 53;

/// A JSON string: `"`, `\` and U+0000-U+001F escaped (short forms where JCS has them), the
/// rest as it is.
pub(crate) fn write_str(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    let bytes = s.as_bytes();
    if !bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\') {
        out.extend_from_slice(bytes); // most strings: one pass to look, one copy
        out.push(b'"');
        return;
    }
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            0x08 => b'b',
            0x09 => b't',
            0x0A => b'n',
            0x0C => b'f',
            0x0D => b'r',
            0x00..=0x1F => 0,
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if short != 0 {
            out.extend_from_slice(&[b'\\', short]);
        } else {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 0xF) as usize]);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

fn write_int(v: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> bool {
    match v.extract::<i64>() {
        Ok(n) if -SAFE < n && n < SAFE => write!(out, "{n}").is_ok(),
        _ => false,
    }
}

fn write_float(v: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> PyResult<bool> {
    write_f64(v.py(), v.downcast::<PyFloat>()?.value(), out)
}

/// A double as RFC 8785 writes it, where that is sure (see the module doc); false otherwise.
pub(crate) fn write_f64(py: Python<'_>, f: f64, out: &mut Vec<u8>) -> PyResult<bool> {
    if !f.is_finite() {
        return Ok(false);
    }
    if f.fract() == 0.0 {
        if f.abs() >= SAFE as f64 {
            return Ok(false);
        }
        return Ok(write!(out, "{}", f as i64).is_ok()); // -0.0 is 0
    }
    if !(1e-4..1e16).contains(&f.abs()) {
        return Ok(false);
    }
    let text = PyFloat::new(py, f).repr()?;
    let digits = text.to_str()?;
    if digits.contains(['e', 'n', 'i']) {
        return Ok(false); // not fixed notation after all: the caller decides
    }
    out.extend_from_slice(digits.as_bytes());
    Ok(true)
}

/// A value of a field typed `Any`: JSON's types only, exact classes only.
fn write_any(v: &Bound<'_, PyAny>, out: &mut Vec<u8>, depth: usize) -> PyResult<bool> {
    if v.is_none() {
        out.extend_from_slice(b"null");
        return Ok(true);
    }
    if v.is_exact_instance_of::<PyString>() {
        return Ok(match v.downcast::<PyString>()?.to_str() {
            Ok(s) => {
                write_str(s, out);
                true
            }
            Err(_) => false,
        });
    }
    if v.is_exact_instance_of::<PyBool>() {
        out.extend_from_slice(if v.is_truthy()? { b"true" } else { b"false" });
        return Ok(true);
    }
    if v.is_exact_instance_of::<PyInt>() {
        return Ok(write_int(v, out));
    }
    if v.is_exact_instance_of::<PyFloat>() {
        return write_float(v, out);
    }
    if depth >= DEPTH {
        return Ok(false);
    }
    if v.is_exact_instance_of::<PyList>() {
        out.push(b'[');
        for (i, child) in v.downcast::<PyList>()?.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            if !write_any(&child, out, depth + 1)? {
                return Ok(false);
            }
        }
        out.push(b']');
        return Ok(true);
    }
    if v.is_exact_instance_of::<PyDict>() {
        let dict = v.downcast::<PyDict>()?;
        let items: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = dict.iter().collect();
        let mut members: Vec<(&str, &Bound<'_, PyAny>)> = Vec::with_capacity(items.len());
        for (key, child) in &items {
            let Ok(key) = key.downcast_exact::<PyString>() else {
                return Ok(false);
            };
            let Ok(text) = key.to_str() else {
                return Ok(false);
            };
            if !text.is_ascii() && text.chars().any(|c| (c as u32) > 0xFFFF) {
                return Ok(false); // UTF-16 order differs from UTF-8's beyond the BMP
            }
            members.push((text, child));
        }
        members.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        out.push(b'{');
        for (i, (key, child)) in members.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_str(key, out);
            out.push(b':');
            if !write_any(child, out, depth + 1)? {
                return Ok(false);
            }
        }
        out.push(b'}');
        return Ok(true);
    }
    Ok(false)
}

/// One planned value; false when the caller must decide.
fn write_value(
    py: Python<'_>,
    plan: &Dump,
    v: &Bound<'_, PyAny>,
    owner: &Bound<'_, PyAny>,
    out: &mut Vec<u8>,
) -> PyResult<bool> {
    match plan {
        Dump::Serializer { function, field } => {
            match crate::json_dump::serialized(py, function, *field, owner, v)? {
                Some(text) => write_any(&text, out, 0),
                None => Ok(false),
            }
        }
        Dump::Nullable(inner) => {
            if v.is_none() {
                out.extend_from_slice(b"null");
                Ok(true)
            } else {
                write_value(py, inner, v, owner, out)
            }
        }
        Dump::Model(model) => write_model(py, model, v, out),
        Dump::Any => write_any(v, out, 0),
        Dump::Str => Ok(v.is_exact_instance_of::<PyString>() && write_any(v, out, 0)?),
        Dump::Int => Ok(v.is_exact_instance_of::<PyInt>() && write_int(v, out)),
        Dump::Bool => Ok(v.is_exact_instance_of::<PyBool>() && write_any(v, out, 0)?),
        Dump::Float => Ok(v.is_exact_instance_of::<PyFloat>() && write_float(v, out)?),
        Dump::Literal { str_ok, int_ok } => {
            if *str_ok && v.is_exact_instance_of::<PyString>() {
                write_any(v, out, 0)
            } else if *int_ok && v.is_exact_instance_of::<PyInt>() {
                Ok(write_int(v, out))
            } else {
                Ok(false)
            }
        }
    }
}

/// A model's members in RFC 8785 order (its plan's `canonical_order`).
pub(crate) fn write_model(
    py: Python<'_>,
    model: &DumpModel,
    m: &Bound<'_, PyAny>,
    out: &mut Vec<u8>,
) -> PyResult<bool> {
    if !m.get_type().is(model.cls.bind(py)) {
        return Ok(false); // a subclass may dump otherwise
    }
    let dict = crate::json_dump::instance_dict(py, m)?;
    out.push(b'{');
    for (n, (i, key)) in model.canonical_order.iter().enumerate() {
        let (attr, _, plan) = &model.fields[*i];
        let Some(value) = dict.get_item(attr.bind(py))? else {
            return Ok(false); // a missing field
        };
        if n > 0 {
            out.push(b',');
        }
        out.extend_from_slice(key);
        if !write_value(py, plan, &value, m, out)? {
            return Ok(false);
        }
    }
    out.push(b'}');
    Ok(true)
}
