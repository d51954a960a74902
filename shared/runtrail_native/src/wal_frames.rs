//! The publisher's write-ahead log frames (`runtrail.publisher.wal.encode`), a batch at a
//! time: the group commit writes every accepted record, so this is per event on the agent.
//!
//! A frame is a head (`<2sII`: magic `RW`, body length, CRC-32 of the body) and a body
//! (`<qqiHHI`: timestamp ms or -1, sequence or -1, key length or -1, eventId length, header
//! count, value length; then the key, the eventId, each header as `<HI` name and value
//! lengths, name, value; then the value). Anything that is not the plain types of a
//! `SpoolRecord`, or does not fit its field, gives None: the Python encoder then decides
//! (and raises what `struct` raises).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

fn optional_i64(v: &Bound<'_, PyAny>) -> Option<i64> {
    if v.is_none() {
        Some(-1)
    } else {
        v.extract().ok()
    }
}

fn frame(record: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> Option<()> {
    let r = record.downcast::<PyTuple>().ok()?;
    if r.len() != 6 {
        return None;
    }
    let key = r.get_item(0).ok()?;
    let key: Option<&[u8]> = if key.is_none() {
        None
    } else {
        Some(key.downcast_exact::<PyBytes>().ok()?.as_bytes())
    };
    let value = r.get_item(1).ok()?;
    let value = value.downcast_exact::<PyBytes>().ok()?.as_bytes();
    let headers = r.get_item(2).ok()?;
    let event_id = r.get_item(3).ok()?;
    let event_id: &str = if event_id.is_none() {
        ""
    } else {
        event_id.downcast::<PyString>().ok()?.to_str().ok()?
    };
    let timestamp = optional_i64(&r.get_item(4).ok()?)?;
    let sequence = optional_i64(&r.get_item(5).ok()?)?;

    let key_len: i32 = match key {
        None => -1,
        Some(k) => i32::try_from(k.len()).ok()?,
    };
    let id_len = u16::try_from(event_id.len()).ok()?;
    let value_len = u32::try_from(value.len()).ok()?;
    let count = u16::try_from(headers.len().ok()?).ok()?;

    let head_at = out.len();
    out.extend_from_slice(&[0u8; 10]); // the head, once the body's length and CRC are known
    let body_at = out.len();
    out.extend_from_slice(&timestamp.to_le_bytes());
    out.extend_from_slice(&sequence.to_le_bytes());
    out.extend_from_slice(&key_len.to_le_bytes());
    out.extend_from_slice(&id_len.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&value_len.to_le_bytes());
    out.extend_from_slice(key.unwrap_or(b""));
    out.extend_from_slice(event_id.as_bytes());
    let mut seen: usize = 0;
    for header in headers.try_iter().ok()? {
        let header = header.ok()?;
        let pair = header.downcast::<PyTuple>().ok()?;
        if pair.len() != 2 {
            return None;
        }
        let name = pair.get_item(0).ok()?;
        let name = name.downcast::<PyString>().ok()?.to_str().ok()?;
        let hv = pair.get_item(1).ok()?;
        let hv = hv.downcast_exact::<PyBytes>().ok()?.as_bytes();
        out.extend_from_slice(&u16::try_from(name.len()).ok()?.to_le_bytes());
        out.extend_from_slice(&u32::try_from(hv.len()).ok()?.to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(hv);
        seen += 1;
    }
    if seen != count as usize {
        return None;
    }
    out.extend_from_slice(value);
    let body = &out[body_at..];
    let body_len = u32::try_from(body.len()).ok()?;
    let crc = crc32fast::hash(body);
    out[head_at..head_at + 2].copy_from_slice(b"RW");
    out[head_at + 2..head_at + 6].copy_from_slice(&body_len.to_le_bytes());
    out[head_at + 6..head_at + 10].copy_from_slice(&crc.to_le_bytes());
    Some(())
}

/// The frames of `records` (a list of `SpoolRecord`), joined; None when unsure of one.
#[pyfunction]
pub fn wal_frames<'py>(
    py: Python<'py>,
    records: &Bound<'py, PyList>,
) -> Option<Bound<'py, PyBytes>> {
    let mut out = Vec::with_capacity(records.len() * 768);
    for record in records.iter() {
        frame(&record, &mut out)?;
    }
    Some(PyBytes::new(py, &out))
}
