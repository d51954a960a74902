//! The Avro binary writer of one schema: the publisher's records encoded exactly as
//! `avro_fast`'s generated encoder encodes them, from the reader's plan of the same schema.
//!
//! It only accepts what the generated encoder accepts without a doubt: exact `None`, `bool`,
//! `int`, `float` and `str`, a `dict` with exactly the record's fields, and unions of null
//! and one other type. On anything else (a subclass, a value out of range, a lone surrogate,
//! another kind of union) it answers None and the generated encoder, then fastavro, decide.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyString};

use crate::{avro_node, Avro};

/// A zig-zag varint of a 64-bit value (`avro_fast.write_long`).
#[inline]
fn write_long(o: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z > 0x7f {
        o.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    o.push(z as u8);
}

fn write_value(s: &Avro, v: &Bound<'_, PyAny>, o: &mut Vec<u8>) -> Option<()> {
    match s {
        Avro::Null => {
            if !v.is_none() {
                return None;
            }
        }
        Avro::Boolean => {
            // True and False are the only exact bools
            let b = v.downcast_exact::<PyBool>().ok()?;
            o.push(b.is_true() as u8);
        }
        Avro::Int => {
            let n: i64 = v.downcast_exact::<PyInt>().ok()?.extract().ok()?;
            if n < i32::MIN as i64 || n > i32::MAX as i64 {
                return None;
            }
            write_long(o, n);
        }
        Avro::Long => {
            let n: i64 = v.downcast_exact::<PyInt>().ok()?.extract().ok()?;
            write_long(o, n);
        }
        Avro::Double => {
            let x = if let Ok(f) = v.downcast_exact::<PyFloat>() {
                f.value()
            } else {
                // an int where a double goes: float(int), correctly rounded as Python does
                let n: i64 = v.downcast_exact::<PyInt>().ok()?.extract().ok()?;
                n as f64
            };
            o.extend_from_slice(&x.to_le_bytes());
        }
        Avro::Str => {
            let text = v.downcast_exact::<PyString>().ok()?.to_str().ok()?;
            write_long(o, text.len() as i64);
            o.extend_from_slice(text.as_bytes());
        }
        Avro::Union(branches) => {
            // the common optional field only: null and one other (non-union) branch
            if branches.len() != 2 {
                return None;
            }
            let null = branches.iter().position(|b| matches!(b, Avro::Null))?;
            let other = &branches[1 - null];
            if matches!(other, Avro::Union(_) | Avro::Null) {
                return None;
            }
            if v.is_none() {
                o.push((2 * null) as u8);
            } else {
                o.push((2 * (1 - null)) as u8);
                write_value(other, v, o)?;
            }
        }
        Avro::Record(fields) => {
            let d = v.downcast_exact::<PyDict>().ok()?;
            if d.len() != fields.len() {
                return None;
            }
            // as many keys as fields and every field found: exactly the record's fields
            for (name, schema) in fields {
                let field = d.get_item(name.bind(v.py())).ok()??;
                write_value(schema, &field, o)?;
            }
        }
    }
    Some(())
}

/// The Avro binary writer of one schema.
#[pyclass(frozen, module = "runtrail_native")]
pub struct AvroWriter {
    root: Avro,
}

#[pymethods]
impl AvroWriter {
    #[new]
    fn new(program: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(AvroWriter {
            root: avro_node(program)?,
        })
    }

    /// `prefix` followed by the record's encoding, or None when unsure.
    fn write<'py>(
        &self,
        py: Python<'py>,
        record: &Bound<'py, PyAny>,
        prefix: &[u8],
    ) -> Option<Bound<'py, PyBytes>> {
        let mut o = Vec::with_capacity(prefix.len() + 512);
        o.extend_from_slice(prefix);
        write_value(&self.root, record, &mut o)?;
        Some(PyBytes::new(py, &o))
    }
}
