//! runtrail's compiled consume path.
//!
//! Two interpreters, each compiled once per schema from a plan that Python derives:
//!
//! - [`AvroReader`] reads an Avro binary body into the record the generated Python decoder
//!   returns (`runtrail.events.avro_fast`);
//! - [`ModelBuilder`] builds a pydantic model instance from a JSON-form dict, as pydantic-core's
//!   lax `validate_python` would, for models whose core schema uses only what the plan knows.
//!
//! Both only *accept*: on anything they are not sure of (a truncated body, a long varint, a
//! value of another type, a constraint not met, an unknown key) they return `None`, and the
//! caller runs the Python path, which gives its own value or its own error. So an odd input
//! gets exactly the answer it got before; only the common case is faster.

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PySet, PyString, PyTuple, PyType};
use regex::Regex;

/// The interned copy of a name: dict keys that are the same object compare without a
/// `memcmp`, and the decoder's record keys are then the builder's lookup keys.
fn interned(name: &Bound<'_, PyAny>) -> PyResult<Py<PyString>> {
    let text = name.downcast::<PyString>()?.to_str()?;
    Ok(PyString::intern(name.py(), text).unbind())
}

// --- Avro ---------------------------------------------------------------------------------

enum Avro {
    Null,
    Boolean,
    Int,
    Long,
    Double,
    Str,
    Union(Vec<Avro>),
    Record(Vec<(Py<PyString>, Avro)>),
}

fn avro_node(node: &Bound<'_, PyAny>) -> PyResult<Avro> {
    let parts = node.downcast::<PyTuple>()?;
    let kind: String = parts.get_item(0)?.extract()?;
    Ok(match kind.as_str() {
        "null" => Avro::Null,
        "boolean" => Avro::Boolean,
        "int" => Avro::Int,
        "long" => Avro::Long,
        "double" => Avro::Double,
        "string" => Avro::Str,
        "union" => {
            let branches = parts.get_item(1)?;
            let mut out = Vec::new();
            for b in branches.try_iter()? {
                out.push(avro_node(&b?)?);
            }
            Avro::Union(out)
        }
        "record" => {
            let fields = parts.get_item(1)?;
            let mut out = Vec::new();
            for f in fields.try_iter()? {
                let f = f?;
                let pair = f.downcast::<PyTuple>()?;
                let name = interned(&pair.get_item(0)?)?;
                out.push((name, avro_node(&pair.get_item(1)?)?));
            }
            Avro::Record(out)
        }
        other => return Err(PyValueError::new_err(format!("no native reader for Avro {other}"))),
    })
}

/// A zig-zag varint of at most 10 bytes holding a 64-bit value (`avro_fast.read_long`).
#[inline]
fn read_long(b: &[u8], p: &mut usize) -> Option<i64> {
    let mut n: u64 = 0;
    let mut shift: u32 = 0;
    loop {
        let x = *b.get(*p)?;
        *p += 1;
        let bits = (x & 0x7f) as u64;
        if shift == 63 && bits > 1 {
            return None; // over 64 bits
        }
        n |= bits << shift;
        if x & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift > 63 {
            return None; // longer than 10 bytes
        }
    }
    Some(((n >> 1) as i64) ^ -((n & 1) as i64))
}

fn read_value(py: Python<'_>, s: &Avro, b: &[u8], p: &mut usize) -> Option<PyObject> {
    Some(match s {
        Avro::Null => py.None(),
        Avro::Boolean => {
            let x = *b.get(*p)?;
            *p += 1;
            if x > 1 {
                return None;
            }
            PyBool::new(py, x == 1).to_owned().into_any().unbind()
        }
        Avro::Int => {
            let v = read_long(b, p)?;
            if v < i32::MIN as i64 || v > i32::MAX as i64 {
                return None;
            }
            v.into_pyobject(py).ok()?.into_any().unbind()
        }
        Avro::Long => read_long(b, p)?.into_pyobject(py).ok()?.into_any().unbind(),
        Avro::Double => {
            let end = p.checked_add(8)?;
            let bytes: [u8; 8] = b.get(*p..end)?.try_into().ok()?;
            *p = end;
            PyFloat::new(py, f64::from_le_bytes(bytes)).into_any().unbind()
        }
        Avro::Str => {
            let n = read_long(b, p)?;
            if n < 0 {
                return None;
            }
            let end = p.checked_add(n as usize)?;
            let text = std::str::from_utf8(b.get(*p..end)?).ok()?;
            *p = end;
            PyString::new(py, text).into_any().unbind()
        }
        Avro::Union(branches) => {
            // the index as its one-byte varint (zig-zag 2n), as the generated decoder reads it
            let x = *b.get(*p)?;
            *p += 1;
            if x & 1 == 1 || x >= 0x80 {
                return None;
            }
            read_value(py, branches.get((x >> 1) as usize)?, b, p)?
        }
        Avro::Record(fields) => {
            let out = PyDict::new(py);
            for (name, schema) in fields {
                let v = read_value(py, schema, b, p)?;
                out.set_item(name.bind(py), v).ok()?;
            }
            out.into_any().unbind()
        }
    })
}

/// The Avro binary reader of one writer schema.
#[pyclass(frozen, module = "runtrail_native")]
struct AvroReader {
    root: Avro,
}

#[pymethods]
impl AvroReader {
    #[new]
    fn new(program: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(AvroReader { root: avro_node(program)? })
    }

    /// `(record, position after it)` for the body at `value[pos:]`, or None when unsure.
    fn read(&self, py: Python<'_>, value: &[u8], pos: usize) -> Option<(PyObject, usize)> {
        let mut p = pos;
        let record = read_value(py, &self.root, value, &mut p)?;
        Some((record, p))
    }
}

// --- pydantic models ---------------------------------------------------------------------

enum Pattern {
    /// `\S` on ASCII text: a byte that is not Unicode White_Space (tab to CR, space)
    NotBlank,
    Regex(Regex),
}

impl Pattern {
    fn new(pattern: &str) -> PyResult<Self> {
        if pattern == "\\S" {
            return Ok(Pattern::NotBlank);
        }
        Regex::new(pattern).map(Pattern::Regex).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Whether ASCII `text` holds a match (`is_match`: anywhere, as pydantic-core searches).
    fn is_match(&self, text: &str) -> bool {
        match self {
            Pattern::NotBlank => text.bytes().any(|b| !matches!(b, b'\t'..=b'\r' | b' ')),
            Pattern::Regex(re) => re.is_match(text),
        }
    }
}

enum Check {
    Str { min_len: Option<usize>, max_len: Option<usize>, pattern: Option<Pattern> },
    Int { ge: Option<i64>, gt: Option<i64>, le: Option<i64>, lt: Option<i64> },
    Float { ge: Option<f64>, gt: Option<f64>, le: Option<f64>, lt: Option<f64> },
    Bool,
    Literal(Vec<PyObject>),
    Nullable(Box<Check>),
    Any,
    Model(Box<Model>),
    /// pydantic's `function-after` (no info): the inner value, then the function's result
    After(PyObject, Box<Check>),
}

struct Field {
    attr: Py<PyString>,
    keys: Vec<Py<PyString>>,
    default: Option<PyObject>,
    check: Check,
}

struct Model {
    cls: Py<PyType>,
    fields: Vec<Field>,
    /// a `mode="before"` model validator (no info): the input is what it returns
    before: Option<PyObject>,
}

fn opt<'py, T: FromPyObject<'py>>(v: Bound<'py, PyAny>) -> PyResult<Option<T>> {
    if v.is_none() {
        Ok(None)
    } else {
        Ok(Some(v.extract()?))
    }
}

fn check_node(node: &Bound<'_, PyAny>) -> PyResult<Check> {
    let parts = node.downcast::<PyTuple>()?;
    let kind: String = parts.get_item(0)?.extract()?;
    Ok(match kind.as_str() {
        "str" => {
            let pattern: Option<String> = opt(parts.get_item(3)?)?;
            let pattern = match pattern {
                Some(p) => Some(Pattern::new(&p)?),
                None => None,
            };
            Check::Str {
                min_len: opt(parts.get_item(1)?)?,
                max_len: opt(parts.get_item(2)?)?,
                pattern,
            }
        }
        "int" => Check::Int {
            ge: opt(parts.get_item(1)?)?,
            gt: opt(parts.get_item(2)?)?,
            le: opt(parts.get_item(3)?)?,
            lt: opt(parts.get_item(4)?)?,
        },
        "float" => Check::Float {
            ge: opt(parts.get_item(1)?)?,
            gt: opt(parts.get_item(2)?)?,
            le: opt(parts.get_item(3)?)?,
            lt: opt(parts.get_item(4)?)?,
        },
        "bool" => Check::Bool,
        "literal" => {
            let mut values = Vec::new();
            for v in parts.get_item(1)?.try_iter()? {
                let v = v?;
                if !(v.is_exact_instance_of::<PyString>() || v.is_exact_instance_of::<PyInt>()) {
                    return Err(PyValueError::new_err("only str and int literals"));
                }
                values.push(v.unbind());
            }
            Check::Literal(values)
        }
        "nullable" => Check::Nullable(Box::new(check_node(&parts.get_item(1)?)?)),
        "any" => Check::Any,
        "model" => Check::Model(Box::new(model_node(node)?)),
        "after" => Check::After(parts.get_item(1)?.unbind(), Box::new(check_node(&parts.get_item(2)?)?)),
        other => return Err(PyValueError::new_err(format!("no native check {other}"))),
    })
}

fn model_node(node: &Bound<'_, PyAny>) -> PyResult<Model> {
    let parts = node.downcast::<PyTuple>()?;
    let cls = parts.get_item(1)?.downcast_into::<PyType>()?.unbind();
    let mut fields = Vec::new();
    for f in parts.get_item(2)?.try_iter()? {
        let f = f?;
        let f = f.downcast::<PyTuple>()?;
        let mut keys = Vec::new();
        for k in f.get_item(1)?.try_iter()? {
            keys.push(interned(&k?)?);
        }
        let required: bool = f.get_item(2)?.extract()?;
        let default = if required { None } else { Some(f.get_item(3)?.unbind()) };
        fields.push(Field {
            attr: interned(&f.get_item(0)?)?,
            keys,
            default,
            check: check_node(&f.get_item(4)?)?,
        });
    }
    let before = parts.get_item(3)?;
    let before = if before.is_none() { None } else { Some(before.unbind()) };
    Ok(Model { cls, fields, before })
}

/// A canonical decimal (`0` or no leading zero, ASCII digits only, fits an i64): what
/// pydantic's lax int reads as the obvious integer. Anything else is left to pydantic.
fn canonical_decimal(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > 18 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if b[0] == b'0' && b.len() > 1 {
        return None;
    }
    s.parse().ok()
}

fn bounds<T: PartialOrd>(v: T, ge: &Option<T>, gt: &Option<T>, le: &Option<T>, lt: &Option<T>) -> bool {
    ge.as_ref().is_none_or(|x| v >= *x)
        && gt.as_ref().is_none_or(|x| v > *x)
        && le.as_ref().is_none_or(|x| v <= *x)
        && lt.as_ref().is_none_or(|x| v < *x)
}

fn check_value(py: Python<'_>, check: &Check, v: &Bound<'_, PyAny>) -> PyResult<Option<PyObject>> {
    let ok = |b: bool| if b { Some(v.clone().unbind()) } else { None };
    Ok(match check {
        Check::Any => Some(v.clone().unbind()),
        Check::Nullable(inner) => {
            if v.is_none() {
                Some(py.None())
            } else {
                check_value(py, inner, v)?
            }
        }
        Check::Str { min_len, max_len, pattern } => {
            if !v.is_exact_instance_of::<PyString>() {
                return Ok(None);
            }
            let s = v.downcast::<PyString>()?;
            if min_len.is_some() || max_len.is_some() {
                let n = s.len()?;
                if !(min_len.is_none_or(|m| n >= m) && max_len.is_none_or(|m| n <= m)) {
                    return Ok(None);
                }
            }
            if let Some(re) = pattern {
                // ASCII only: there every regex engine and Unicode version agree
                let Ok(text) = s.to_str() else { return Ok(None) };
                if !text.is_ascii() || !re.is_match(text) {
                    return Ok(None);
                }
            }
            Some(v.clone().unbind())
        }
        Check::Int { ge, gt, le, lt } => {
            if v.is_exact_instance_of::<PyInt>() {
                let Ok(n) = v.extract::<i64>() else { return Ok(None) };
                ok(bounds(n, ge, gt, le, lt))
            } else if v.is_exact_instance_of::<PyString>() {
                let text = v.downcast::<PyString>()?.to_str()?;
                match canonical_decimal(text) {
                    Some(n) if bounds(n, ge, gt, le, lt) => {
                        Some(n.into_pyobject(py)?.into_any().unbind())
                    }
                    _ => None,
                }
            } else {
                None
            }
        }
        Check::Float { ge, gt, le, lt } => {
            if !v.is_exact_instance_of::<PyFloat>() {
                return Ok(None);
            }
            let f = v.downcast::<PyFloat>()?.value();
            ok(f.is_finite() && bounds(f, ge, gt, le, lt))
        }
        Check::Bool => ok(v.is_exact_instance_of::<PyBool>()),
        Check::Literal(values) => {
            let exact = v.is_exact_instance_of::<PyString>() || v.is_exact_instance_of::<PyInt>();
            if !exact {
                return Ok(None);
            }
            for expected in values {
                let e = expected.bind(py);
                if e.get_type().is(&v.get_type()) && e.eq(v)? {
                    return Ok(Some(e.clone().unbind()));
                }
            }
            None
        }
        Check::Model(model) => build_model(py, model, v)?,
        Check::After(function, inner) => match check_value(py, inner, v)? {
            // an error is pydantic's to report: it runs the (pure) validator again
            Some(value) => function.bind(py).call1((value,)).ok().map(Bound::unbind),
            None => None,
        },
    })
}

/// `object.__setattr__` without the model's own `__setattr__` (frozen models refuse it):
/// what pydantic-core does when it fills a validated instance.
fn force_setattr(obj: &Bound<'_, PyAny>, name: &Bound<'_, PyString>, value: &Bound<'_, PyAny>) -> PyResult<()> {
    let rc = unsafe { ffi::PyObject_GenericSetAttr(obj.as_ptr(), name.as_ptr(), value.as_ptr()) };
    if rc < 0 {
        Err(PyErr::fetch(obj.py()))
    } else {
        Ok(())
    }
}

fn build_model(py: Python<'_>, model: &Model, input: &Bound<'_, PyAny>) -> PyResult<Option<PyObject>> {
    let before;
    let input = match &model.before {
        Some(function) => match function.bind(py).call1((input,)) {
            Ok(value) => {
                before = value;
                &before
            }
            Err(_) => return Ok(None), // pydantic runs it again and reports the error
        },
        None => input,
    };
    if !input.is_exact_instance_of::<PyDict>() {
        return Ok(None);
    }
    let input = input.downcast::<PyDict>()?;
    let out = PyDict::new(py);
    let fields_set = PySet::empty(py)?;
    let mut used = 0usize;
    for field in &model.fields {
        // the first spelling found is the one pydantic takes; a second one present is a key
        // no field used, which the count below catches
        let mut found: Option<Bound<'_, PyAny>> = None;
        for key in &field.keys {
            if let Some(v) = input.get_item(key.bind(py))? {
                found = Some(v);
                break;
            }
        }
        let attr = field.attr.bind(py);
        match found {
            Some(v) => {
                used += 1;
                let Some(value) = check_value(py, &field.check, &v)? else { return Ok(None) };
                out.set_item(attr, value)?;
                fields_set.add(attr)?;
            }
            None => match &field.default {
                Some(default) => out.set_item(attr, default.bind(py))?,
                None => return Ok(None),
            },
        }
    }
    if used != input.len() {
        return Ok(None); // a key no field takes: pydantic says which
    }
    let cls = model.cls.bind(py);
    let instance = unsafe {
        let tp = cls.as_type_ptr();
        let new = (*tp).tp_new.ok_or_else(|| PyValueError::new_err("type without tp_new"))?;
        let args = PyTuple::empty(py);
        Bound::from_owned_ptr_or_err(py, new(tp, args.as_ptr(), std::ptr::null_mut()))?
    };
    force_setattr(&instance, pyo3::intern!(py, "__dict__"), out.as_any())?;
    force_setattr(&instance, pyo3::intern!(py, "__pydantic_extra__"), &py.None().into_bound(py))?;
    force_setattr(&instance, pyo3::intern!(py, "__pydantic_private__"), &py.None().into_bound(py))?;
    force_setattr(&instance, pyo3::intern!(py, "__pydantic_fields_set__"), fields_set.as_any())?;
    Ok(Some(instance.unbind()))
}

/// Builds one pydantic model class from JSON-form dicts, as its validator would.
#[pyclass(frozen, module = "runtrail_native")]
struct ModelBuilder {
    model: Model,
}

#[pymethods]
impl ModelBuilder {
    #[new]
    fn new(plan: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(ModelBuilder { model: model_node(plan)? })
    }

    /// The validated instance, or None when pydantic must decide.
    fn build(&self, py: Python<'_>, form: &Bound<'_, PyAny>) -> PyResult<Option<PyObject>> {
        build_model(py, &self.model, form)
    }
}

#[pymodule]
fn runtrail_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<AvroReader>()?;
    m.add_class::<ModelBuilder>()?;
    Ok(())
}
