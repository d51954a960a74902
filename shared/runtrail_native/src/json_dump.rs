//! [`JsonDumper`]: a pydantic model instance's JSON form (`model_dump(mode="json",
//! by_alias=True)`), from a plan of its core schema that `runtrail.events.native.json_dumper`
//! makes once per class.
//!
//! Like the other interpreters it only accepts: on a value its plan does not cover (a
//! subclass, a missing field, a value of another type, a non-finite float, a lone surrogate)
//! `dump` answers None and the caller asks pydantic, whose answer (or error) stands. What it
//! returns is a fresh dict in the fields' order, its keys the serialization aliases; strings,
//! numbers and booleans are the instance's own objects, the values of fields typed `Any` fresh
//! copies of their containers (`json_copy`), as pydantic's serializer makes them.
//! `canonical` writes the RFC 8785 bytes of that form from the same plan
//! ([`crate::json_canonical`]), without building it.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyString, PyTuple, PyType};

use crate::copy_value;

/// How one value is dumped (plan tags as `runtrail.events.native` writes them).
pub(crate) enum Dump {
    /// tag 0: (0, cls, ((attr, alias, plan), ...))
    Model(Box<DumpModel>),
    /// tag 1: (1, plan): None stays None
    Nullable(Box<Dump>),
    /// tag 2: a JSON value, copied
    Any,
    /// tags 3-6: the instance's own str (with a UTF-8 form), int, bool, finite float
    Str,
    Int,
    Bool,
    Float,
    /// tag 7: (7, str allowed, int allowed)
    Literal {
        str_ok: bool,
        int_ok: bool,
    },
    /// tag 8: (8, function, is a field serializer): a plain serializer that returns a str
    Serializer {
        function: PyObject,
        field: bool,
    },
}

pub(crate) struct DumpModel {
    pub(crate) cls: Py<PyType>,
    /// (attribute name, serialization alias, plan), in the fields' order
    pub(crate) fields: Vec<(Py<PyString>, Py<PyString>, Dump)>,
    /// each field's index and its `"alias":` bytes, in RFC 8785 order (the aliases' UTF-16
    /// code units)
    pub(crate) canonical_order: Vec<(usize, Vec<u8>)>,
}

/// An instance's `__dict__` (a new reference).
pub(crate) fn instance_dict<'py>(
    py: Python<'py>,
    m: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    // SAFETY: GenericGetDict returns a new reference (or NULL with an error set)
    let dict = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::PyObject_GenericGetDict(m.as_ptr(), std::ptr::null_mut()),
        )?
    };
    Ok(dict.downcast_into::<PyDict>()?)
}

fn plan_node(node: &Bound<'_, PyAny>) -> PyResult<Dump> {
    let node = node.downcast::<PyTuple>()?;
    let tag: u8 = node.get_item(0)?.extract()?;
    Ok(match tag {
        0 => {
            let cls = node.get_item(1)?.downcast_into::<PyType>()?.unbind();
            let mut fields = Vec::new();
            let mut keys: Vec<(Vec<u16>, usize)> = Vec::new();
            for (i, field) in node.get_item(2)?.downcast::<PyTuple>()?.iter().enumerate() {
                let field = field.downcast::<PyTuple>()?;
                let alias = field.get_item(1)?;
                keys.push((alias.extract::<String>()?.encode_utf16().collect(), i));
                fields.push((
                    crate::interned(&field.get_item(0)?)?,
                    crate::interned(&alias)?,
                    plan_node(&field.get_item(2)?)?,
                ));
            }
            keys.sort();
            let mut canonical_order = Vec::new();
            for (_, i) in keys {
                let mut key = Vec::new();
                crate::json_canonical::write_str(fields[i].1.bind(node.py()).to_str()?, &mut key);
                key.push(b':');
                canonical_order.push((i, key));
            }
            Dump::Model(Box::new(DumpModel {
                cls,
                fields,
                canonical_order,
            }))
        }
        1 => Dump::Nullable(Box::new(plan_node(&node.get_item(1)?)?)),
        2 => Dump::Any,
        3 => Dump::Str,
        4 => Dump::Int,
        5 => Dump::Bool,
        6 => Dump::Float,
        7 => Dump::Literal {
            str_ok: node.get_item(1)?.extract()?,
            int_ok: node.get_item(2)?.extract()?,
        },
        8 => Dump::Serializer {
            function: node.get_item(1)?.unbind(),
            field: node.get_item(2)?.extract()?,
        },
        _ => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "unknown dump tag {tag}"
            )))
        }
    })
}

fn dump_model(
    py: Python<'_>,
    model: &DumpModel,
    m: &Bound<'_, PyAny>,
) -> PyResult<Option<PyObject>> {
    if !m.get_type().is(model.cls.bind(py)) {
        return Ok(None); // a subclass may dump otherwise: pydantic decides
    }
    let dict = instance_dict(py, m)?;
    // SAFETY: a fresh dict, filled below before anyone else sees it
    let out = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::_PyDict_NewPresized(model.fields.len() as ffi::Py_ssize_t),
        )?
    };
    for (attr, alias, plan) in &model.fields {
        // SAFETY: a borrowed reference, held only while the instance's dict is alive
        let raw = unsafe { ffi::PyDict_GetItemWithError(dict.as_ptr(), attr.as_ptr()) };
        if raw.is_null() {
            if PyErr::occurred(py) {
                return Err(PyErr::fetch(py));
            }
            return Ok(None); // a missing field: pydantic decides
        }
        let value = unsafe { Bound::from_borrowed_ptr(py, raw) };
        let Some(dumped) = dump_value(py, plan, &value, m)? else {
            return Ok(None);
        };
        // SAFETY: both are valid objects; SetItem does not steal them
        if unsafe { ffi::PyDict_SetItem(out.as_ptr(), alias.as_ptr(), dumped.as_ptr()) } != 0 {
            return Err(PyErr::fetch(py));
        }
    }
    Ok(Some(out.unbind()))
}

/// What a plain serializer makes of a value: a str, or None (pydantic decides the rest).
pub(crate) fn serialized<'py>(
    py: Python<'py>,
    function: &PyObject,
    field: bool,
    owner: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let out = if field {
        function.bind(py).call1((owner, v))?
    } else {
        function.bind(py).call1((v,))?
    };
    Ok(out.is_exact_instance_of::<PyString>().then_some(out))
}

fn dump_value(
    py: Python<'_>,
    plan: &Dump,
    v: &Bound<'_, PyAny>,
    owner: &Bound<'_, PyAny>,
) -> PyResult<Option<PyObject>> {
    let same = || Ok(Some(v.clone().unbind()));
    match plan {
        Dump::Serializer { function, field } => {
            Ok(serialized(py, function, *field, owner, v)?.map(|text| text.unbind()))
        }
        Dump::Nullable(inner) => {
            if v.is_none() {
                same()
            } else {
                dump_value(py, inner, v, owner)
            }
        }
        Dump::Model(model) => dump_model(py, model, v),
        Dump::Any => {
            if v.is_none() {
                same()
            } else {
                copy_value(v, 0)
            }
        }
        Dump::Str => {
            // a lone surrogate has no UTF-8 form: pydantic refuses it
            if v.is_exact_instance_of::<PyString>() && v.downcast::<PyString>()?.to_str().is_ok() {
                same()
            } else {
                Ok(None)
            }
        }
        Dump::Int => {
            if v.is_exact_instance_of::<PyInt>() {
                same()
            } else {
                Ok(None)
            }
        }
        Dump::Bool => {
            if v.is_exact_instance_of::<PyBool>() {
                same()
            } else {
                Ok(None)
            }
        }
        Dump::Float => {
            if v.is_exact_instance_of::<PyFloat>() && v.downcast::<PyFloat>()?.value().is_finite() {
                same()
            } else {
                Ok(None)
            }
        }
        Dump::Literal { str_ok, int_ok } => {
            let ok = (*str_ok && v.is_exact_instance_of::<PyString>())
                || (*int_ok && v.is_exact_instance_of::<PyInt>());
            if ok {
                same()
            } else {
                Ok(None)
            }
        }
    }
}

/// The JSON form of one model class's instances, from its plan.
#[pyclass(frozen, module = "runtrail_native")]
pub struct JsonDumper {
    model: DumpModel,
}

#[pymethods]
impl JsonDumper {
    #[new]
    fn new(plan: &Bound<'_, PyAny>) -> PyResult<Self> {
        match plan_node(plan)? {
            Dump::Model(model) => Ok(JsonDumper { model: *model }),
            _ => Err(pyo3::exceptions::PyValueError::new_err(
                "a dumper's plan is a model's",
            )),
        }
    }

    /// The instance's JSON form, or None for pydantic to dump it.
    fn dump(&self, py: Python<'_>, instance: &Bound<'_, PyAny>) -> PyResult<Option<PyObject>> {
        dump_model(py, &self.model, instance)
    }

    /// `dump`, as a call.
    fn __call__(&self, py: Python<'_>, instance: &Bound<'_, PyAny>) -> PyResult<Option<PyObject>> {
        dump_model(py, &self.model, instance)
    }

    /// The RFC 8785 bytes of the instance's JSON form, or None for the caller to
    /// canonicalise the form itself.
    fn canonical<'py>(
        &self,
        py: Python<'py>,
        instance: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let mut out = Vec::with_capacity(1024);
        if crate::json_canonical::write_model(py, &self.model, instance, &mut out)? {
            Ok(Some(PyBytes::new(py, &out)))
        } else {
            Ok(None)
        }
    }
}
