//! runtrail's compiled consume path.
//!
//! Interpreters, each compiled once per schema from a plan that Python derives:
//!
//! - [`AvroReader`] reads an Avro binary body into the record the generated Python decoder
//!   returns (`runtrail.events.avro_fast`);
//! - [`ModelBuilder`] builds a pydantic model instance from a JSON-form dict, as pydantic-core's
//!   lax `validate_python` would, for models whose core schema uses only what the plan knows;
//! - [`json_dump::JsonDumper`] gives an instance's JSON form, as pydantic's serializer would,
//!   and its RFC 8785 bytes (`json_canonical`);
//! - [`EventDecoder`] decodes whole events straight from their bodies, and writes the RFC 8785
//!   bytes of an event as its writer wrote it, what the audit chain hashes (`written_jcs`).
//!
//! All only *accept*: on anything they are not sure of (a truncated body, a long varint, a
//! value of another type, a constraint not met, an unknown key) they return `None`, and the
//! caller runs the Python path, which gives its own value or its own error. So an odd input
//! gets exactly the answer it got before; only the common case is faster.

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PySet, PyString, PyTuple, PyType};
use regex::Regex;

mod avro_write;
mod json_canonical;
mod json_dump;
mod secret_scan;
mod wal_frames;
mod written_jcs;

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
        other => {
            return Err(PyValueError::new_err(format!(
                "no native reader for Avro {other}"
            )))
        }
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

/// The bytes of a string (or bytes) value: its length, then that many bytes (None when the
/// body cannot hold them).
#[inline]
fn read_bytes<'b>(b: &'b [u8], p: &mut usize) -> Option<&'b [u8]> {
    let n = usize::try_from(read_long(b, p)?).ok()?;
    let end = p.checked_add(n)?;
    let text = b.get(*p..end)?;
    *p = end;
    Some(text)
}

/// The branch a union's index selects: the index as its one-byte varint (zig-zag 2n), as the
/// generated decoder reads it (None for anything else).
fn union_branch<'a, T>(branches: &'a [T], b: &[u8], p: &mut usize) -> Option<&'a T> {
    let x = *b.get(*p)?;
    *p += 1;
    if x & 1 == 1 || x >= 0x80 {
        return None;
    }
    branches.get((x >> 1) as usize)
}

/// How many objects and arrays a JSON text opens: at the depth limit or more, the value is
/// walked (the count bounds its depth from above).
fn opens(text: &[u8]) -> usize {
    text.iter().filter(|c| **c == b'{' || **c == b'[').count()
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
            PyFloat::new(py, f64::from_le_bytes(bytes))
                .into_any()
                .unbind()
        }
        Avro::Str => utf8_str(py, read_bytes(b, p)?)?,
        Avro::Union(branches) => read_value(py, union_branch(branches, b, p)?, b, p)?,
        Avro::Record(fields) => {
            let out = unsafe {
                Bound::from_owned_ptr_or_err(
                    py,
                    ffi::_PyDict_NewPresized(fields.len() as ffi::Py_ssize_t),
                )
            }
            .ok()?
            .downcast_into::<PyDict>()
            .ok()?;
            for (name, schema) in fields {
                let v = read_value(py, schema, b, p)?;
                out.set_item(name.bind(py), v).ok()?;
            }
            out.into_any().unbind()
        }
    })
}

/// A str of UTF-8 bytes, decoded (and so validated) once, by CPython's strict decoder: None
/// when they are not UTF-8 (the Python path then says why).
fn utf8_str(py: Python<'_>, text: &[u8]) -> Option<PyObject> {
    let made = unsafe {
        ffi::PyUnicode_DecodeUTF8(
            text.as_ptr().cast(),
            text.len() as ffi::Py_ssize_t,
            std::ptr::null(),
        )
    };
    if made.is_null() {
        drop(PyErr::take(py)); // not UTF-8: the error is the Python path's to report
        return None;
    }
    Some(unsafe { PyObject::from_owned_ptr(py, made) })
}

/// Move `p` past one value of `s` without making it: the end of a span (None when the bytes
/// cannot hold one; `read_value` then decides).
fn skip_value(s: &Avro, b: &[u8], p: &mut usize) -> Option<()> {
    match s {
        Avro::Null => {}
        Avro::Boolean => *p = p.checked_add(1).filter(|e| *e <= b.len())?,
        Avro::Int | Avro::Long => {
            read_long(b, p)?;
        }
        Avro::Double => *p = p.checked_add(8).filter(|e| *e <= b.len())?,
        Avro::Str => {
            read_bytes(b, p)?;
        }
        Avro::Union(branches) => {
            skip_value(union_branch(branches, b, p)?, b, p)?;
        }
        Avro::Record(fields) => {
            for (_, schema) in fields {
                skip_value(schema, b, p)?;
            }
        }
    }
    Some(())
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
        Ok(AvroReader {
            root: avro_node(program)?,
        })
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
    /// The envelope's timestamp pattern on ASCII text (see `iso_8601`)
    Iso8601,
    Regex(Regex),
}

/// `ISO_8601` of `runtrail/events/envelope.py`, the pattern of every timestamp.
const ISO_8601: &str = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$";

/// Whether ASCII `t` matches `ISO_8601`, by hand: the lazy DFA took a tenth of a decode (two
/// timestamps an event). On ASCII text `\d` is 0-9 and `$` is the end, so this is the same
/// set; `tests/test_native.py` holds the two equal on random and near-miss timestamps.
fn iso_8601(t: &[u8]) -> bool {
    let digits =
        |at: usize, n: usize| t.len() >= at + n && t[at..at + n].iter().all(u8::is_ascii_digit);
    let at = |i: usize, c: u8| t.get(i) == Some(&c);
    if !(digits(0, 4)
        && at(4, b'-')
        && digits(5, 2)
        && at(7, b'-')
        && digits(8, 2)
        && at(10, b'T')
        && digits(11, 2)
        && at(13, b':')
        && digits(14, 2)
        && at(16, b':')
        && digits(17, 2))
    {
        return false;
    }
    let mut p = 19;
    if at(p, b'.') {
        let first = p + 1;
        p = first;
        while p < t.len() && t[p].is_ascii_digit() {
            p += 1;
        }
        if p == first || p - first > 9 {
            return false;
        }
    }
    match t.get(p) {
        Some(b'Z') => t.len() == p + 1,
        Some(b'+' | b'-') => {
            t.len() == p + 6 && digits(p + 1, 2) && at(p + 3, b':') && digits(p + 4, 2)
        }
        _ => false,
    }
}

impl Pattern {
    fn new(pattern: &str) -> PyResult<Self> {
        if pattern == "\\S" {
            return Ok(Pattern::NotBlank);
        }
        if pattern == ISO_8601 {
            return Ok(Pattern::Iso8601);
        }
        Regex::new(pattern)
            .map(Pattern::Regex)
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Whether ASCII `text` holds a match (`is_match`: anywhere, as pydantic-core searches).
    fn is_match(&self, text: &str) -> bool {
        match self {
            Pattern::NotBlank => text.bytes().any(|b| !matches!(b, b'\t'..=b'\r' | b' ')),
            Pattern::Iso8601 => iso_8601(text.as_bytes()),
            Pattern::Regex(re) => re.is_match(text),
        }
    }
}

enum Check {
    Str {
        min_len: Option<usize>,
        max_len: Option<usize>,
        pattern: Option<Pattern>,
    },
    Int {
        ge: Option<i64>,
        gt: Option<i64>,
        le: Option<i64>,
        lt: Option<i64>,
    },
    Float {
        ge: Option<f64>,
        gt: Option<f64>,
        le: Option<f64>,
        lt: Option<f64>,
    },
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

/// The most fields a planned model has: the fields found are tracked in a stack array.
const MAX_FIELDS: usize = 64;

struct Model {
    cls: Py<PyType>,
    fields: Vec<Field>,
    /// every field name: the fields set of an instance built from all of its fields
    all_fields: Py<PySet>,
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
        "after" => Check::After(
            parts.get_item(1)?.unbind(),
            Box::new(check_node(&parts.get_item(2)?)?),
        ),
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
        let default = if required {
            None
        } else {
            Some(f.get_item(3)?.unbind())
        };
        fields.push(Field {
            attr: interned(&f.get_item(0)?)?,
            keys,
            default,
            check: check_node(&f.get_item(4)?)?,
        });
    }
    let before = parts.get_item(3)?;
    let before = if before.is_none() {
        None
    } else {
        Some(before.unbind())
    };
    if fields.len() > MAX_FIELDS {
        return Err(PyValueError::new_err(format!(
            "more than {MAX_FIELDS} fields"
        )));
    }
    let all_fields = PySet::new(
        parts.py(),
        fields.iter().map(|f| f.attr.clone_ref(parts.py())),
    )?;
    Ok(Model {
        cls,
        fields,
        before,
        all_fields: all_fields.unbind(),
    })
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

fn bounds<T: PartialOrd>(
    v: T,
    ge: &Option<T>,
    gt: &Option<T>,
    le: &Option<T>,
    lt: &Option<T>,
) -> bool {
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
        Check::Str {
            min_len,
            max_len,
            pattern,
        } => {
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
                let Ok(text) = s.to_str() else {
                    return Ok(None);
                };
                if !text.is_ascii() || !re.is_match(text) {
                    return Ok(None);
                }
            }
            Some(v.clone().unbind())
        }
        Check::Int { ge, gt, le, lt } => {
            if v.is_exact_instance_of::<PyInt>() {
                let Ok(n) = v.extract::<i64>() else {
                    return Ok(None);
                };
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
fn force_setattr(
    obj: &Bound<'_, PyAny>,
    name: &Bound<'_, PyString>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let rc = unsafe { ffi::PyObject_GenericSetAttr(obj.as_ptr(), name.as_ptr(), value.as_ptr()) };
    if rc < 0 {
        Err(PyErr::fetch(obj.py()))
    } else {
        Ok(())
    }
}

fn build_model(
    py: Python<'_>,
    model: &Model,
    input: &Bound<'_, PyAny>,
) -> PyResult<Option<PyObject>> {
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
    let n = model.fields.len();
    let out = unsafe {
        Bound::from_owned_ptr_or_err(py, ffi::_PyDict_NewPresized(n as ffi::Py_ssize_t))?
    };
    let out = out.downcast_into::<PyDict>()?;
    let mut found_at = [false; MAX_FIELDS];
    let mut used = 0usize;
    // the input usually holds the fields in their order, under their first spelling (the
    // decoder writes them so, with the same interned names): take them in step, and look a
    // field up only when the next key is not its own
    let mut cursor: ffi::Py_ssize_t = 0;
    let mut in_step = true;
    for (i, field) in model.fields.iter().enumerate() {
        let mut found: Option<Bound<'_, PyAny>> = None;
        if in_step {
            let mut key: *mut ffi::PyObject = std::ptr::null_mut();
            let mut value: *mut ffi::PyObject = std::ptr::null_mut();
            let mut next = cursor;
            let more = unsafe { ffi::PyDict_Next(input.as_ptr(), &mut next, &mut key, &mut value) };
            if more != 0 && key == field.keys[0].as_ptr() {
                found = Some(unsafe { Bound::from_borrowed_ptr(py, value) });
                cursor = next;
            } else {
                in_step = false;
            }
        }
        if found.is_none() {
            // the first spelling found is the one pydantic takes; a second one present is a
            // key no field used, which the count below catches
            for key in &field.keys {
                if let Some(v) = input.get_item(key.bind(py))? {
                    found = Some(v);
                    break;
                }
            }
        }
        let attr = field.attr.bind(py);
        match found {
            Some(v) => {
                used += 1;
                found_at[i] = true;
                let Some(value) = check_value(py, &field.check, &v)? else {
                    return Ok(None);
                };
                out.set_item(attr, value)?;
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
    let fields_set = if used == n {
        unsafe { Bound::from_owned_ptr_or_err(py, ffi::PySet_New(model.all_fields.as_ptr()))? }
    } else {
        let set = PySet::empty(py)?;
        for (i, field) in model.fields.iter().enumerate() {
            if found_at[i] {
                set.add(field.attr.bind(py))?;
            }
        }
        set.into_any()
    };
    let instance = new_instance(py, &model.cls)?;
    fill_instance(py, &instance, &out, &fields_set)?;
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
        Ok(ModelBuilder {
            model: model_node(plan)?,
        })
    }

    /// The validated instance, or None when pydantic must decide.
    fn build(&self, py: Python<'_>, form: &Bound<'_, PyAny>) -> PyResult<Option<PyObject>> {
        build_model(py, &self.model, form)
    }
}

// --- RFC 8785 -----------------------------------------------------------------------------

const MAX_SAFE: i64 = 1 << 53;

/// Whether a key is all in the Basic Multilingual Plane (UTF-16 order is code-point order
/// there); None for a string with lone surrogates (no UTF-8 form: Python decides).
fn bmp_only(key: &Bound<'_, PyString>) -> Option<bool> {
    let text = key.to_str().ok()?;
    Some(text.is_ascii() || text.chars().all(|c| (c as u32) <= 0xFFFF))
}

/// A scalar child: Some(verdict), or None for a container (or a float: checked on its own).
fn scalar_ok(v: &Bound<'_, PyAny>) -> Option<bool> {
    if v.is_none() || v.is_exact_instance_of::<PyString>() || v.is_exact_instance_of::<PyBool>() {
        return Some(true);
    }
    if v.is_exact_instance_of::<PyInt>() {
        return Some(matches!(v.extract::<i64>(), Ok(n) if -MAX_SAFE < n && n < MAX_SAFE));
    }
    None
}

/// `runtrail.events.jsonform._fast_ok`: whether orjson's key-sorted output of `value` is its
/// RFC 8785 form. None when unsure (a key with lone surrogates): the Python check decides.
#[pyfunction]
fn jcs_fast_ok(value: &Bound<'_, PyAny>) -> PyResult<Option<bool>> {
    fast_ok(value, usize::MAX)
}

/// `jcs_fast_ok`, and no object or array nested `max_depth` or more levels down (the value
/// itself is level 0): `EventLimits.check_form`'s proof that its walk cannot raise, in the one
/// pass that checks the types and floats.
#[pyfunction]
fn jcs_fast_ok_within(value: &Bound<'_, PyAny>, max_depth: usize) -> PyResult<Option<bool>> {
    fast_ok(value, max_depth)
}

fn fast_ok(value: &Bound<'_, PyAny>, max_depth: usize) -> PyResult<Option<bool>> {
    let mut stack = vec![(value.clone(), 0usize)];
    while let Some((item, depth)) = stack.pop() {
        if item.is_exact_instance_of::<PyDict>() {
            if depth >= max_depth {
                return Ok(Some(false));
            }
            for (key, child) in item.downcast::<PyDict>()?.iter() {
                if !key.is_exact_instance_of::<PyString>() {
                    return Ok(Some(false));
                }
                match bmp_only(key.downcast::<PyString>()?) {
                    Some(true) => {}
                    Some(false) => return Ok(Some(false)),
                    None => return Ok(None),
                }
                match scalar_ok(&child) {
                    Some(true) => {}
                    Some(false) => return Ok(Some(false)),
                    None => stack.push((child, depth + 1)),
                }
            }
        } else if item.is_exact_instance_of::<PyList>() {
            if depth >= max_depth {
                return Ok(Some(false));
            }
            for child in item.downcast::<PyList>()?.iter() {
                match scalar_ok(&child) {
                    Some(true) => {}
                    Some(false) => return Ok(Some(false)),
                    None => stack.push((child, depth + 1)),
                }
            }
        } else if item.is_exact_instance_of::<PyFloat>() {
            let f = item.downcast::<PyFloat>()?.value();
            if !(f.is_finite() && f.fract() != 0.0 && f.abs() >= 1e-4) {
                return Ok(Some(false));
            }
        } else {
            match scalar_ok(&item) {
                Some(true) => {}
                _ => return Ok(Some(false)),
            }
        }
    }
    Ok(Some(true))
}

/// How deep `json_copy` goes before it leaves the value to pydantic (which has its own guard).
const COPY_DEPTH: usize = 256;

/// A fresh copy of a JSON value's containers, as pydantic's `model_dump(mode="json")` makes
/// of a field typed `Any`: dicts and lists new, scalars the same objects. None when the value
/// holds anything else (a tuple, a non-str key, a subclass, a float that is not finite, a
/// lone surrogate, or deeper than `COPY_DEPTH`): pydantic's serializer decides those.
#[pyfunction]
fn json_copy(value: &Bound<'_, PyAny>) -> PyResult<Option<PyObject>> {
    copy_value(value, 0)
}

fn copy_value(value: &Bound<'_, PyAny>, depth: usize) -> PyResult<Option<PyObject>> {
    let py = value.py();
    if value.is_exact_instance_of::<PyString>() {
        // a lone surrogate has no UTF-8 form: pydantic's serializer refuses it
        let ok = value.downcast::<PyString>()?.to_str().is_ok();
        return Ok(if ok {
            Some(value.clone().unbind())
        } else {
            None
        });
    }
    if value.is_none()
        || value.is_exact_instance_of::<PyBool>()
        || value.is_exact_instance_of::<PyInt>()
    {
        return Ok(Some(value.clone().unbind()));
    }
    if value.is_exact_instance_of::<PyFloat>() {
        let f = value.downcast::<PyFloat>()?.value();
        return Ok(if f.is_finite() {
            Some(value.clone().unbind())
        } else {
            None
        });
    }
    if depth >= COPY_DEPTH {
        return Ok(None);
    }
    if value.is_exact_instance_of::<PyDict>() {
        let out = PyDict::new(py);
        for (key, child) in value.downcast::<PyDict>()?.iter() {
            if !key.is_exact_instance_of::<PyString>()
                || key.downcast::<PyString>()?.to_str().is_err()
            {
                return Ok(None);
            }
            match copy_value(&child, depth + 1)? {
                Some(copied) => out.set_item(key, copied)?,
                None => return Ok(None),
            }
        }
        return Ok(Some(out.into_any().unbind()));
    }
    if value.is_exact_instance_of::<PyList>() {
        let list = value.downcast::<PyList>()?;
        let mut items = Vec::with_capacity(list.len());
        for child in list.iter() {
            match copy_value(&child, depth + 1)? {
                Some(copied) => items.push(copied),
                None => return Ok(None),
            }
        }
        return Ok(Some(PyList::new(py, items)?.into_any().unbind()));
    }
    Ok(None)
}

#[pymodule]
fn runtrail_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<AvroReader>()?;
    m.add_class::<avro_write::AvroWriter>()?;
    m.add_class::<secret_scan::MarkerScanner>()?;
    m.add_class::<ModelBuilder>()?;
    m.add_class::<json_dump::JsonDumper>()?;
    m.add_class::<EventDecoder>()?;
    m.add_class::<SequenceState>()?;
    m.add_function(wrap_pyfunction!(jcs_fast_ok, m)?)?;
    m.add_function(wrap_pyfunction!(jcs_fast_ok_within, m)?)?;
    m.add_function(wrap_pyfunction!(json_copy, m)?)?;
    m.add_function(wrap_pyfunction!(wal_frames::wal_frames, m)?)?;
    Ok(())
}

// --- whole events ------------------------------------------------------------------------

/// One current-version writer schema: its reader, the checks `EventCodec` makes on the
/// decoded record, and the builder of its event class.
struct EventSchema {
    reader: Avro,
    event_type: Py<PyString>,
    version: i64,
    json_fields: Vec<Py<PyString>>,
    walked_typed: Py<PyTuple>,
    walked_all: Py<PyTuple>,
    model: Model,
    /// for an old version: the function that lifts its JSON form to the current version
    upcast: Option<PyObject>,
    /// for a current version: the event built straight from the body, no JSON form between
    direct: Option<DirectModel>,
    /// the RFC 8785 bytes of the JSON form as written, straight from the body
    written: Option<written_jcs::Written>,
}

/// A record read straight into the model it is the wire form of (field i of the record is
/// field i of the model, under its first spelling): the JSON form is never built.
struct DirectModel {
    cls: Py<PyType>,
    fields: Vec<DirectField>,
    all_fields: Py<PySet>,
    /// An envelope part other than `data` (the actor): the bytes last read and the frozen
    /// instance built from them, handed out again for the same bytes. Most events of a
    /// stream share their actor; building it was a tenth of a decode.
    last: Option<std::sync::Mutex<Option<(Vec<u8>, PyObject)>>>,
}

struct DirectField {
    attr: Py<PyString>,
    /// how the value is read, then checked, when it is not a direct nested model
    avro: Avro,
    check: Check,
    /// a nested record read straight into its model, and the after validator around it
    nested: Option<(Box<DirectModel>, Option<PyObject>)>,
    /// a record read as a dict (its model has a before validator) whose JSON-text fields
    /// are parsed in that dict before it is checked
    json_names: Vec<Py<PyString>>,
    /// a JSON-text field of `data`: parsed, its `{`/`[` counted for the depth walk
    json_text: bool,
    /// the envelope's `recordedAt`: filled from the log-append time when null
    recorded_at: bool,
    /// an old version's `data`: the upcasters' chain, applied to the record read as a dict
    lift: Option<PyObject>,
    /// an old version's `schemaVersion`: the writer's version it must hold, and the current
    /// version the event gets
    version: Option<(i64, PyObject)>,
}

/// An old writer version read straight into the current event: its `data` lifted by the
/// upcasters (a Python function of the dict), its `schemaVersion` the current one.
struct Lift<'a, 'py> {
    data: &'a Bound<'py, PyAny>,
    writer_version: i64,
    current_version: &'a Bound<'py, PyAny>,
}

/// The direct plan of an Avro record plan and the builder plan of its model; an error when
/// they do not pair field by field or the model has a before validator (the caller then
/// reads the record as a dict and builds it from that).
fn direct_model(
    avro: &Bound<'_, PyAny>,
    model: &Bound<'_, PyAny>,
    json_fields: &[String],
    top: bool,
    lift: Option<&Lift<'_, '_>>,
) -> PyResult<DirectModel> {
    let py = avro.py();
    let no = |why: &str| Err(PyValueError::new_err(why.to_string()));
    let a = avro.downcast::<PyTuple>()?;
    let m = model.downcast::<PyTuple>()?;
    if a.get_item(0)?.extract::<String>()? != "record"
        || m.get_item(0)?.extract::<String>()? != "model"
    {
        return no("not a record and a model");
    }
    if !m.get_item(3)?.is_none() {
        return no("a before validator");
    }
    let afields: Vec<Bound<'_, PyAny>> = a.get_item(1)?.try_iter()?.collect::<PyResult<_>>()?;
    let mfields: Vec<Bound<'_, PyAny>> = m.get_item(2)?.try_iter()?.collect::<PyResult<_>>()?;
    if afields.len() != mfields.len() || mfields.len() > MAX_FIELDS {
        return no("fields differ");
    }
    let mut fields = Vec::new();
    for (af, mf) in afields.iter().zip(mfields.iter()) {
        let af = af.downcast::<PyTuple>()?;
        let mf = mf.downcast::<PyTuple>()?;
        let name: String = af.get_item(0)?.extract()?;
        let first: String = mf.get_item(1)?.get_item(0)?.extract()?;
        if name != first {
            return no("fields in another order");
        }
        let anode = af.get_item(1)?;
        let check = mf.get_item(4)?;
        let kind: String = anode.downcast::<PyTuple>()?.get_item(0)?.extract()?;
        let mut nested = None;
        let mut json_names = Vec::new();
        let lifted = top && name == "data" && lift.is_some();
        if lifted {
            // the old record read as a dict, its JSON texts parsed, then lifted and checked
            for name in json_fields {
                json_names.push(PyString::intern(py, name).unbind());
            }
        } else if kind == "record" {
            let ckind: String = check.downcast::<PyTuple>()?.get_item(0)?.extract()?;
            let inner_json: &[String] = if top && name == "data" {
                json_fields
            } else {
                &[]
            };
            if ckind == "model" {
                if let Ok(mut d) = direct_model(&anode, &check, inner_json, false, None) {
                    if top && name != "data" && d.plain() {
                        d.last = Some(std::sync::Mutex::new(None));
                    }
                    nested = Some((Box::new(d), None));
                }
            } else if ckind == "after" {
                let c = check.downcast::<PyTuple>()?;
                let inner = c.get_item(2)?;
                if let Ok(d) = direct_model(&anode, &inner, inner_json, false, None) {
                    nested = Some((Box::new(d), Some(c.get_item(1)?.unbind())));
                }
            }
            if nested.is_none() {
                for name in inner_json {
                    json_names.push(PyString::intern(py, name).unbind());
                }
            }
        }
        fields.push(DirectField {
            attr: interned(&mf.get_item(0)?)?,
            avro: avro_node(&anode)?,
            check: check_node(&check)?,
            nested,
            json_names,
            json_text: !top && json_fields.contains(&name),
            recorded_at: top && name == "recordedAt",
            lift: if lifted {
                lift.map(|l| l.data.clone().unbind())
            } else {
                None
            },
            version: match lift {
                Some(l) if top && name == "schemaVersion" => {
                    Some((l.writer_version, l.current_version.clone().unbind()))
                }
                _ => None,
            },
        });
    }
    let all_fields = PySet::new(py, fields.iter().map(|f| f.attr.clone_ref(py)))?;
    Ok(DirectModel {
        cls: m.get_item(1)?.downcast_into::<PyType>()?.unbind(),
        fields,
        all_fields: all_fields.unbind(),
        last: None,
    })
}

impl DirectModel {
    /// Whether an instance depends on its bytes alone (no nested model, JSON text, lift,
    /// version or recordedAt, which read the context): only such a one may be handed out again.
    fn plain(&self) -> bool {
        self.fields.iter().all(|f| {
            f.nested.is_none()
                && f.json_names.is_empty()
                && !f.json_text
                && !f.recorded_at
                && f.lift.is_none()
                && f.version.is_none()
        })
    }

    /// The Avro record this model reads (for skipping its span).
    fn span_end(&self, b: &[u8], start: usize) -> Option<usize> {
        let mut p = start;
        for f in &self.fields {
            skip_value(&f.avro, b, &mut p)?;
        }
        Some(p)
    }
}

/// What one direct read needs besides the bytes.
struct DirectRead<'a, 'py> {
    loads: &'a Bound<'py, PyAny>,
    recorded_at: &'a Bound<'py, PyAny>,
    depth_limit: Option<usize>,
    /// a JSON-text field's text has at least `depth_limit` opens: the walk needs the written form
    deep: bool,
}

fn new_instance<'py>(py: Python<'py>, cls: &Py<PyType>) -> PyResult<Bound<'py, PyAny>> {
    let cls = cls.bind(py);
    unsafe {
        let tp = cls.as_type_ptr();
        let new = (*tp)
            .tp_new
            .ok_or_else(|| PyValueError::new_err("type without tp_new"))?;
        let args = PyTuple::empty(py);
        Bound::from_owned_ptr_or_err(py, new(tp, args.as_ptr(), std::ptr::null_mut()))
    }
}

/// Fill a new instance as pydantic-core does: `__dict__`, extra, private, fields set.
fn fill_instance(
    py: Python<'_>,
    instance: &Bound<'_, PyAny>,
    dict: &Bound<'_, PyDict>,
    fields_set: &Bound<'_, PyAny>,
) -> PyResult<()> {
    force_setattr(instance, pyo3::intern!(py, "__dict__"), dict.as_any())?;
    force_setattr(
        instance,
        pyo3::intern!(py, "__pydantic_extra__"),
        &py.None().into_bound(py),
    )?;
    force_setattr(
        instance,
        pyo3::intern!(py, "__pydantic_private__"),
        &py.None().into_bound(py),
    )?;
    force_setattr(
        instance,
        pyo3::intern!(py, "__pydantic_fields_set__"),
        fields_set,
    )
}

/// A JSON text parsed (None when it is not a string or not JSON: the Python path says why),
/// and counted for the depth walk.
fn parse_json_text<'py>(
    raw: &Bound<'py, PyAny>,
    ctx: &mut DirectRead<'_, 'py>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Ok(text) = raw.downcast::<PyString>() else {
        return Ok(None);
    };
    if let Some(limit) = ctx.depth_limit {
        let Ok(utf8) = text.to_str() else {
            return Ok(None);
        };
        if opens(utf8.as_bytes()) >= limit {
            ctx.deep = true;
        }
    }
    Ok(ctx.loads.call1((text,)).ok())
}

/// A JSON-text field (a string, or null, in the Avro) parsed straight from the message's
/// bytes: no str is made of the text, `loads` reads a view of it (released after, so nothing
/// can keep it past the bytes). None, as from `parse_json_text`, when the Python path decides.
fn read_json_text<'py>(
    py: Python<'py>,
    s: &Avro,
    b: &[u8],
    p: &mut usize,
    ctx: &mut DirectRead<'_, 'py>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    match s {
        Avro::Null => Ok(Some(py.None().into_bound(py))),
        Avro::Union(branches) => match union_branch(branches, b, p) {
            Some(branch) => read_json_text(py, branch, b, p, ctx),
            None => Ok(None),
        },
        Avro::Str => {
            let Some(text) = read_bytes(b, p) else {
                return Ok(None);
            };
            if ctx.depth_limit.is_some_and(|limit| opens(text) >= limit) {
                ctx.deep = true;
            }
            let view = unsafe {
                Bound::from_owned_ptr_or_err(
                    py,
                    ffi::PyMemoryView_FromMemory(
                        text.as_ptr() as *mut std::os::raw::c_char,
                        text.len() as ffi::Py_ssize_t,
                        ffi::PyBUF_READ,
                    ),
                )?
            };
            let parsed = ctx.loads.call1((&view,)).ok();
            view.call_method0(pyo3::intern!(py, "release"))?;
            Ok(parsed)
        }
        _ => Ok(None), // JSON text in anything but a string: the Python path refuses it
    }
}

/// A nested model: the instance made last for the same bytes when it keeps one, else a new one.
fn read_nested<'py>(
    py: Python<'py>,
    m: &DirectModel,
    b: &[u8],
    p: &mut usize,
    ctx: &mut DirectRead<'_, 'py>,
) -> PyResult<Option<PyObject>> {
    let Some(last) = &m.last else {
        return read_direct(py, m, b, p, ctx);
    };
    let start = *p;
    let Some(end) = m.span_end(b, start) else {
        return read_direct(py, m, b, p, ctx);
    };
    let span = &b[start..end];
    // the lock is never held while Python code may run (a check's validator): another
    // thread waiting on it would hold the GIL this one needs back
    let lock = || {
        last.lock()
            .map_err(|_| PyValueError::new_err("poisoned cache"))
    };
    if let Some((bytes, instance)) = lock()?.as_ref() {
        if bytes.as_slice() == span {
            *p = end;
            return Ok(Some(instance.clone_ref(py)));
        }
    }
    let made = read_direct(py, m, b, p, ctx)?;
    if let Some(instance) = &made {
        if *p == end {
            *lock()? = Some((span.to_vec(), instance.clone_ref(py)));
        }
    }
    Ok(made)
}

fn read_direct<'py>(
    py: Python<'py>,
    m: &DirectModel,
    b: &[u8],
    p: &mut usize,
    ctx: &mut DirectRead<'_, 'py>,
) -> PyResult<Option<PyObject>> {
    let out = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::_PyDict_NewPresized(m.fields.len() as ffi::Py_ssize_t),
        )?
    }
    .downcast_into::<PyDict>()?;
    for f in &m.fields {
        let value = if let Some((nested, after)) = &f.nested {
            let Some(v) = read_nested(py, nested, b, p, ctx)? else {
                return Ok(None);
            };
            match after {
                Some(function) => match function.bind(py).call1((v,)) {
                    Ok(v) => v.unbind(),
                    Err(_) => return Ok(None), // pydantic runs it again and reports it
                },
                None => v,
            }
        } else {
            let mut raw = if f.json_text {
                let Some(parsed) = read_json_text(py, &f.avro, b, p, ctx)? else {
                    return Ok(None);
                };
                parsed
            } else {
                let Some(raw) = read_value(py, &f.avro, b, p) else {
                    return Ok(None);
                };
                raw.into_bound(py)
            };
            if !f.json_names.is_empty() {
                let Ok(record) = raw.downcast::<PyDict>() else {
                    return Ok(None);
                };
                for name in &f.json_names {
                    let Some(text) = record.get_item(name.bind(py))? else {
                        continue;
                    };
                    if text.is_none() {
                        continue;
                    }
                    let Some(parsed) = parse_json_text(&text, ctx)? else {
                        return Ok(None);
                    };
                    record.set_item(name.bind(py), parsed)?;
                }
            }
            if let Some(lift) = &f.lift {
                raw = match lift.bind(py).call1((&raw,)) {
                    Ok(lifted) => lifted,
                    Err(_) => return Ok(None), // the Python path raises it again
                };
            }
            if let Some((writer, current)) = &f.version {
                if raw.extract::<i64>().ok() != Some(*writer) {
                    return Ok(None); // the record contradicts its schema: the codec says so
                }
                raw = current.bind(py).clone();
            }
            if f.recorded_at && raw.is_none() && !ctx.recorded_at.is_none() {
                raw = ctx.recorded_at.clone();
            }
            let Some(v) = check_value(py, &f.check, &raw)? else {
                return Ok(None);
            };
            v
        };
        out.set_item(f.attr.bind(py), value)?;
    }
    let instance = new_instance(py, &m.cls)?;
    let fields_set =
        unsafe { Bound::from_owned_ptr_or_err(py, ffi::PySet_New(m.all_fields.as_ptr()))? };
    fill_instance(py, &instance, &out, &fields_set)?;
    Ok(Some(instance.unbind()))
}

/// The messages `decode_run` finished of one partition, in a row: the offset after the last.
struct Stretch<'py> {
    topic: Bound<'py, PyAny>,
    partition_obj: Bound<'py, PyAny>,
    partition: i64,
    next: i64,
}

impl Stretch<'_> {
    /// Put the stretch's next offset in `positions` (`(topic, partition) -> next`).
    fn put(stretch: Option<Stretch<'_>>, positions: &Bound<'_, PyDict>) -> PyResult<()> {
        if let Some(s) = stretch {
            positions.set_item((s.topic, s.partition_obj), s.next)?;
        }
        Ok(())
    }
}

/// `EventCodec.decode_parts`, in one call per event.
#[pyclass(frozen, module = "runtrail_native")]
struct EventDecoder {
    schemas: std::collections::HashMap<[u8; 8], EventSchema>,
    loads: PyObject,
}

const MAGIC: [u8; 2] = [0xC3, 0x01];
const HEADER_LEN: usize = 10;

impl EventDecoder {
    /// The schema a single-object encoded value names by its fingerprint, if it is one of
    /// this decoder's (a value without the `C3 01` header is the Python path's to refuse).
    fn schema_of(&self, b: &[u8]) -> Option<&EventSchema> {
        if b.len() < HEADER_LEN || b[..2] != MAGIC {
            return None;
        }
        let fp: [u8; 8] = b[2..HEADER_LEN].try_into().ok()?;
        self.schemas.get(&fp)
    }
}

#[pymethods]
impl EventDecoder {
    /// `schemas`: (fingerprint, reader plan, type, version, JSON-text fields, walked typed
    /// fields, all walked fields, builder plan of the current class, upcast function or
    /// None, the upcasters' function of `data` or None, the current version) per schema;
    /// `loads`: the JSON parser.
    #[new]
    fn new(schemas: &Bound<'_, PyAny>, loads: PyObject) -> PyResult<Self> {
        let mut out = std::collections::HashMap::new();
        for item in schemas.try_iter()? {
            let item = item?;
            let t = item.downcast::<PyTuple>()?;
            let fp: Vec<u8> = t.get_item(0)?.extract()?;
            let fp: [u8; 8] = fp
                .try_into()
                .map_err(|_| PyValueError::new_err("fingerprint of 8 bytes"))?;
            let mut json_fields = Vec::new();
            for name in t.get_item(4)?.try_iter()? {
                json_fields.push(interned(&name?)?);
            }
            out.insert(
                fp,
                EventSchema {
                    reader: avro_node(&t.get_item(1)?)?,
                    event_type: interned(&t.get_item(2)?)?,
                    version: t.get_item(3)?.extract()?,
                    json_fields,
                    walked_typed: t.get_item(5)?.downcast_into::<PyTuple>()?.unbind(),
                    walked_all: t.get_item(6)?.downcast_into::<PyTuple>()?.unbind(),
                    model: model_node(&t.get_item(7)?)?,
                    upcast: {
                        let f = t.get_item(8)?;
                        if f.is_none() {
                            None
                        } else {
                            Some(f.unbind())
                        }
                    },
                    direct: {
                        let names: Vec<String> = t.get_item(4)?.extract()?;
                        let (lift_data, current) = (t.get_item(9)?, t.get_item(10)?);
                        let lift = Lift {
                            data: &lift_data,
                            writer_version: t.get_item(3)?.extract()?,
                            current_version: &current,
                        };
                        let lift = if lift_data.is_none() {
                            None
                        } else {
                            Some(&lift)
                        };
                        direct_model(&t.get_item(1)?, &t.get_item(7)?, &names, true, lift).ok()
                    },
                    written: {
                        let names: Vec<String> = t.get_item(4)?.extract()?;
                        let event_type: String = t.get_item(2)?.extract()?;
                        let version: i64 = t.get_item(3)?.extract()?;
                        written_jcs::plan(&t.get_item(1)?, &event_type, version, &names).ok()
                    },
                },
            );
        }
        Ok(EventDecoder {
            schemas: out,
            loads,
        })
    }

    /// The RFC 8785 bytes of the event's JSON form as written (`EventCodec.written_canonical`),
    /// read straight from the body; None when the Python path must decide.
    fn written_canonical<'py>(
        &self,
        py: Python<'py>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, pyo3::types::PyBytes>>> {
        let Ok(bytes) = value.downcast::<pyo3::types::PyBytes>() else {
            return Ok(None);
        };
        let b = bytes.as_bytes();
        let Some(plan) = self.schema_of(b).and_then(|s| s.written.as_ref()) else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(b.len() + b.len() / 2);
        let mut p = HEADER_LEN;
        if written_jcs::write(py, plan, b, &mut p, &mut out)?.is_none() || p != b.len() {
            return Ok(None);
        }
        Ok(Some(pyo3::types::PyBytes::new(py, &out)))
    }

    /// `(event, to_walk)`, read straight from the body (an old version's `data` lifted by
    /// the upcasters) without the
    /// written JSON form; None when `decode` or the Python path must decide, which includes
    /// a JSON-text field deep enough to walk (the walk reads the written form).
    #[pyo3(signature = (value, recorded_at, depth_limit))]
    fn decode_event(
        &self,
        py: Python<'_>,
        value: &Bound<'_, PyAny>,
        recorded_at: &Bound<'_, PyAny>,
        depth_limit: Option<usize>,
    ) -> PyResult<Option<(PyObject, PyObject)>> {
        let Ok(bytes) = value.downcast::<pyo3::types::PyBytes>() else {
            return Ok(None);
        };
        let b = bytes.as_bytes();
        let Some(schema) = self.schema_of(b) else {
            return Ok(None);
        };
        let Some(direct) = &schema.direct else {
            return Ok(None);
        };
        let loads = self.loads.bind(py);
        let mut ctx = DirectRead {
            loads,
            recorded_at,
            depth_limit,
            deep: false,
        };
        let mut p = HEADER_LEN;
        let Some(event) = read_direct(py, direct, b, &mut p, &mut ctx)? else {
            return Ok(None);
        };
        if p != b.len() || ctx.deep {
            return Ok(None);
        }
        let walk = match depth_limit {
            Some(_) => schema.walked_typed.clone_ref(py).into_any(),
            None => schema.walked_all.clone_ref(py).into_any(),
        };
        Ok(Some((event, walk)))
    }

    /// `BatchDecoder.decode_batch`'s common case, from `messages[start]` on: each message
    /// without an error, within `max_bytes`, read straight from its bytes with nothing to walk
    /// and NEXT in its run's sequence is appended to `out` as a `delivered` tuple (written
    /// None) and its partition's next offset put in `positions`. Stops at the first message
    /// it does not finish and returns its index, with `(event, verdict)` when the sequence
    /// check was made (its state changed: the caller must not check again), else None; the
    /// caller's Python path handles that message and calls again after it.
    #[pyo3(signature = (messages, start, checker, positions, out, delivered, max_bytes, depth_limit, iso_from_ms))]
    #[allow(clippy::too_many_arguments)]
    fn decode_run<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyList>,
        start: usize,
        checker: &Bound<'py, SequenceState>,
        positions: &Bound<'py, PyDict>,
        out: &Bound<'py, PyList>,
        delivered: &Bound<'py, PyType>,
        max_bytes: usize,
        depth_limit: Option<usize>,
        iso_from_ms: &Bound<'py, PyAny>,
    ) -> PyResult<(usize, Option<(PyObject, PyObject)>)> {
        let none = py.None().into_bound(py);
        // LogAppendTime is stamped per produce request, so consecutive messages share it
        let (mut last_ts, mut last_iso): (Option<i64>, Bound<'py, PyAny>) = (None, none.clone());
        // a partition's next offset is put in `positions` once per stretch of its messages
        // (a consumed batch comes in long stretches of one partition), and once at the end
        let mut stretch: Option<Stretch<'py>> = None;
        let n = messages.len();
        let stop = 'run: {
            for i in start..n {
                let msg = messages.get_item(i)?;
                if !msg.call_method0(pyo3::intern!(py, "error"))?.is_none() {
                    break 'run (i, None);
                }
                let value = msg.call_method0(pyo3::intern!(py, "value"))?;
                let Ok(bytes) = value.downcast::<pyo3::types::PyBytes>() else {
                    break 'run (i, None);
                };
                if bytes.as_bytes().len() > max_bytes {
                    break 'run (i, None);
                }
                let stamp = msg.call_method0(pyo3::intern!(py, "timestamp"))?;
                let stamp = stamp.downcast::<PyTuple>()?;
                let (ts_type, ts_obj) = (stamp.get_item(0)?, stamp.get_item(1)?);
                let ts: i64 = ts_obj.extract()?;
                if last_ts != Some(ts) {
                    last_ts = Some(ts);
                    last_iso = if ts_type.is_truthy()? {
                        iso_from_ms.call1((&ts_obj,))?
                    } else {
                        none.clone()
                    };
                }
                let Some((event, walk)) = self.decode_event(py, &value, &last_iso, depth_limit)?
                else {
                    break 'run (i, None);
                };
                if !walk.bind(py).downcast::<PyTuple>()?.is_empty() {
                    break 'run (i, None);
                }
                let event = event.into_bound(py);
                let partition_obj = msg.call_method0(pyo3::intern!(py, "partition"))?;
                let partition: i64 = partition_obj.extract()?;
                // the envelope's fields from the instance's own dict (read_direct filled it): a
                // dict lookup each, not an attribute lookup through the class
                let fields = event.getattr(pyo3::intern!(py, "__dict__"))?;
                let fields = fields.downcast::<PyDict>()?;
                let field = |name: &Bound<'py, PyString>| -> PyResult<Bound<'py, PyAny>> {
                    fields
                        .get_item(name)?
                        .ok_or_else(|| PyValueError::new_err("an event without its envelope"))
                };
                let tenant_id = field(pyo3::intern!(py, "tenant_id"))?;
                let run_id = field(pyo3::intern!(py, "run_id"))?;
                let sequence: i64 = field(pyo3::intern!(py, "sequence"))?.extract()?;
                let event_id = field(pyo3::intern!(py, "event_id"))?;
                // borrowed for the check alone: no Python code runs while it is held
                let verdict = checker.borrow_mut().check_index(
                    partition,
                    tenant_id.downcast::<PyString>()?.to_str()?,
                    run_id.downcast::<PyString>()?.to_str()?,
                    sequence,
                    event_id.downcast::<PyString>()?.to_str()?,
                );
                if verdict != NEXT {
                    let verdict = checker.borrow().verdicts[verdict].clone_ref(py);
                    break 'run (i, Some((event.unbind(), verdict)));
                }
                let topic = msg.call_method0(pyo3::intern!(py, "topic"))?;
                let offset = msg.call_method0(pyo3::intern!(py, "offset"))?;
                let next: i64 = offset.extract::<i64>()? + 1;
                stretch = match stretch {
                    Some(mut same) if same.partition == partition && same.topic.eq(&topic)? => {
                        same.next = next;
                        Some(same)
                    }
                    other => {
                        Stretch::put(other, positions)?;
                        Some(Stretch {
                            topic: topic.clone(),
                            partition_obj: partition_obj.clone(),
                            partition,
                            next,
                        })
                    }
                };
                let key = msg.call_method0(pyo3::intern!(py, "key"))?;
                let items: [&Bound<'py, PyAny>; 8] = [
                    &event,
                    &none,
                    &topic,
                    &partition_obj,
                    &offset,
                    &ts_obj,
                    &key,
                    &msg,
                ];
                out.append(new_tuple_of(delivered, &items)?)?;
            }
            (n, None)
        };
        Stretch::put(stretch, positions)?;
        Ok(stop)
    }

    /// `(event, written, to_walk)` as `EventCodec.decode_parts` returns them, or None when
    /// the Python path must decide (a schema it was not given, anything odd, any refusal).
    #[pyo3(signature = (value, recorded_at, depth_limit))]
    fn decode(
        &self,
        py: Python<'_>,
        value: &Bound<'_, PyAny>,
        recorded_at: &Bound<'_, PyAny>,
        depth_limit: Option<usize>,
    ) -> PyResult<Option<(PyObject, PyObject, PyObject)>> {
        let Ok(bytes) = value.downcast::<pyo3::types::PyBytes>() else {
            return Ok(None);
        };
        let b = bytes.as_bytes();
        let Some(schema) = self.schema_of(b) else {
            return Ok(None);
        };
        let mut p = HEADER_LEN;
        let Some(record) = read_value(py, &schema.reader, b, &mut p) else {
            return Ok(None);
        };
        if p != b.len() {
            return Ok(None);
        }
        let record = record.bind(py).downcast::<PyDict>()?.clone();
        let same_type = match record.get_item(pyo3::intern!(py, "type"))? {
            Some(t) => t.eq(schema.event_type.bind(py))?,
            None => false,
        };
        let same_version = match record.get_item(pyo3::intern!(py, "schemaVersion"))? {
            Some(v) => v.extract::<i64>().ok() == Some(schema.version),
            None => false,
        };
        if !(same_type && same_version) {
            return Ok(None);
        }
        let mut to_walk: Option<Vec<PyObject>> = None;
        if !schema.json_fields.is_empty() {
            let Some(data) = record.get_item(pyo3::intern!(py, "data"))? else {
                return Ok(None);
            };
            let data = data.downcast::<PyDict>()?;
            for name in &schema.json_fields {
                let name = name.bind(py);
                let Some(text) = data.get_item(name)? else {
                    continue;
                };
                if text.is_none() {
                    continue;
                }
                let Ok(s) = text.downcast::<PyString>() else {
                    return Ok(None);
                };
                if let Some(limit) = depth_limit {
                    let Ok(utf8) = s.to_str() else {
                        return Ok(None);
                    };
                    if opens(utf8.as_bytes()) >= limit {
                        to_walk
                            .get_or_insert_with(|| {
                                schema
                                    .walked_typed
                                    .bind(py)
                                    .iter()
                                    .map(Bound::unbind)
                                    .collect()
                            })
                            .push(name.clone().into_any().unbind());
                    }
                }
                match self.loads.bind(py).call1((text,)) {
                    Ok(parsed) => data.set_item(name, parsed)?,
                    Err(_) => return Ok(None), // the Python path says why it is not JSON
                }
            }
        }
        let seq_key = pyo3::intern!(py, "sequence");
        let Some(sequence) = record.get_item(seq_key)? else {
            return Ok(None);
        };
        record.set_item(seq_key, sequence.str()?)?;
        let lifted = match &schema.upcast {
            Some(upcast) => match upcast.bind(py).call1((&record,)) {
                Ok(form) => match form.downcast_into::<PyDict>() {
                    Ok(form) => form,
                    Err(_) => return Ok(None),
                },
                Err(_) => return Ok(None), // the Python path raises it again, with its reason
            },
            None => record.clone(),
        };
        let rec_key = pyo3::intern!(py, "recordedAt");
        let current =
            if !recorded_at.is_none() && lifted.get_item(rec_key)?.is_none_or(|v| v.is_none()) {
                let copy = lifted.copy()?;
                copy.set_item(rec_key, recorded_at)?;
                copy
            } else {
                lifted
            };
        let Some(event) = build_model(py, &schema.model, current.as_any())? else {
            return Ok(None);
        };
        let walk = match (to_walk, depth_limit) {
            (Some(names), _) => PyTuple::new(py, names)?.into_any().unbind(),
            (None, Some(_)) => schema.walked_typed.clone_ref(py).into_any(),
            (None, None) => schema.walked_all.clone_ref(py).into_any(),
        };
        Ok(Some((event, record.into_any().unbind(), walk)))
    }
}

// --- per-run sequence checks -------------------------------------------------------------

/// An instance of the tuple subclass `cls` (a named tuple) holding `items`, made as
/// `tuple.__new__(cls, items)` makes it, without calling the class's Python `__new__`.
fn new_tuple_of<'py>(
    cls: &Bound<'py, PyType>,
    items: &[&Bound<'py, PyAny>],
) -> PyResult<Bound<'py, PyAny>> {
    unsafe {
        let tp = cls.as_type_ptr();
        if ffi::PyType_IsSubtype(tp, std::ptr::addr_of_mut!(ffi::PyTuple_Type)) == 0 {
            return Err(PyValueError::new_err("not a tuple subclass"));
        }
        let alloc = (*tp)
            .tp_alloc
            .ok_or_else(|| PyValueError::new_err("type without tp_alloc"))?;
        let obj = alloc(tp, items.len() as ffi::Py_ssize_t);
        let obj = Bound::from_owned_ptr_or_err(cls.py(), obj)?;
        for (index, item) in items.iter().enumerate() {
            ffi::PyTuple_SET_ITEM(
                obj.as_ptr(),
                index as ffi::Py_ssize_t,
                (*item).clone().into_ptr(),
            );
        }
        Ok(obj)
    }
}

/// Indices into `SequenceState::verdicts`, in `runtrail.runtime.sequencing.Verdict` order.
const NEXT: usize = 0;
const GAP: usize = 1;
const DUPLICATE: usize = 2;
const REORDERED: usize = 3;
const CONFLICT: usize = 4;

/// One run's sequence state: the last sequence and the recent ones' event IDs, oldest first.
struct RunSequences {
    last: i64,
    recent: std::collections::HashMap<i64, String>,
    order: std::collections::VecDeque<i64>,
}

/// The runs of one partition, with their insertion order (the oldest are evicted first).
#[derive(Default)]
struct PartitionRuns {
    runs: std::collections::HashMap<Vec<u8>, RunSequences>,
    order: std::collections::VecDeque<Vec<u8>>,
}

/// A run's key: tenant and run ID, length-prefixed so that no two pairs share one.
fn run_key(tenant_id: &str, run_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(8 + tenant_id.len() + run_id.len());
    write_run_key(&mut key, tenant_id, run_id);
    key
}

/// `run_key` into `key` (cleared first): the check reuses one buffer for every lookup.
fn write_run_key(key: &mut Vec<u8>, tenant_id: &str, run_id: &str) {
    key.clear();
    key.extend_from_slice(&(tenant_id.len() as u64).to_le_bytes());
    key.extend_from_slice(tenant_id.as_bytes());
    key.extend_from_slice(run_id.as_bytes());
}

/// `runtrail.runtime.sequencing.SequenceChecker`, compiled: the same verdicts from the same
/// state (a window of recent sequences per run, runs capped per partition, oldest first).
#[pyclass(module = "runtrail_native")]
struct SequenceState {
    partitions: std::collections::HashMap<i64, PartitionRuns>,
    /// the `Verdict` members: NEXT, GAP, DUPLICATE, REORDERED, CONFLICT
    verdicts: Vec<PyObject>,
    window: usize,
    max_runs: usize,
    /// the key of the run looked up last (a buffer: a key is allocated only for a new run)
    key: Vec<u8>,
}

impl SequenceState {
    fn check_index(
        &mut self,
        partition: i64,
        tenant_id: &str,
        run_id: &str,
        sequence: i64,
        event_id: &str,
    ) -> usize {
        let runs = self.partitions.entry(partition).or_default();
        write_run_key(&mut self.key, tenant_id, run_id);
        let Some(state) = runs.runs.get_mut(self.key.as_slice()) else {
            let key = self.key.clone();
            if runs.runs.len() >= self.max_runs {
                for _ in 0..self.max_runs / 10 {
                    if let Some(old) = runs.order.pop_front() {
                        runs.runs.remove(&old);
                    }
                }
            }
            let mut recent = std::collections::HashMap::new();
            recent.insert(sequence, event_id.to_owned());
            let order = std::collections::VecDeque::from([sequence]);
            runs.order.push_back(key.clone());
            runs.runs.insert(
                key,
                RunSequences {
                    last: sequence,
                    recent,
                    order,
                },
            );
            return NEXT;
        };
        if let Some(seen) = state.recent.get(&sequence) {
            return if seen == event_id {
                DUPLICATE
            } else {
                CONFLICT
            };
        }
        state.recent.insert(sequence, event_id.to_owned());
        state.order.push_back(sequence);
        if state.recent.len() > self.window {
            if let Some(oldest) = state.order.pop_front() {
                state.recent.remove(&oldest);
            }
        }
        let last = state.last;
        if last.checked_add(1) == Some(sequence) {
            state.last = sequence;
            return NEXT;
        }
        if sequence > last {
            state.last = sequence;
            return GAP;
        }
        REORDERED
    }
}

#[pymethods]
impl SequenceState {
    #[new]
    fn new(verdicts: Vec<PyObject>, window: usize, max_runs: usize) -> PyResult<Self> {
        if verdicts.len() != 5 {
            return Err(PyValueError::new_err(
                "five verdicts: NEXT, GAP, DUPLICATE, REORDERED, CONFLICT",
            ));
        }
        Ok(SequenceState {
            partitions: std::collections::HashMap::new(),
            verdicts,
            window: window.max(1),
            max_runs: max_runs.max(1),
            key: Vec::new(),
        })
    }

    /// The verdict on `sequence` of the run, recording it (`SequenceChecker.check`).
    fn check(
        &mut self,
        py: Python<'_>,
        partition: i64,
        tenant_id: &str,
        run_id: &str,
        sequence: i64,
        event_id: &str,
    ) -> PyObject {
        let index = self.check_index(partition, tenant_id, run_id, sequence, event_id);
        self.verdicts[index].clone_ref(py)
    }

    /// The event ID that holds `sequence` of the run (`SequenceChecker.holder`).
    fn holder(
        &self,
        partition: i64,
        tenant_id: &str,
        run_id: &str,
        sequence: i64,
    ) -> Option<String> {
        let runs = self.partitions.get(&partition)?;
        let state = runs.runs.get(&run_key(tenant_id, run_id))?;
        state.recent.get(&sequence).cloned()
    }

    /// Forget the partitions' runs (`SequenceChecker.drop`).
    fn drop(&mut self, partitions: Vec<i64>) {
        for partition in partitions {
            self.partitions.remove(&partition);
        }
    }
}
