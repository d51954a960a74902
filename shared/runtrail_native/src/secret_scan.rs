//! The redactor's prefilter over an event's ASCII JSON text (`secret_markers.has_marker`):
//! one case-insensitive Aho-Corasick scan in place of lower-casing and copying the text for
//! the Python automaton, then the same check per match as `_any_marker`.
//!
//! The markers and their kinds come from Python (`secret_markers`), so there is one list of
//! them; this holds only the algorithm. Text with any non-ASCII byte gives None (the Python
//! scan decides). `tests/test_secret_markers.py` holds the two to the same answers.

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Python's `\s` on ASCII: space, `\t \n \v \f \r` and the separators `\x1c`–`\x1f`.
#[inline]
fn is_space(c: u8) -> bool {
    c == b' ' || (0x09..=0x0d).contains(&c) || (0x1c..=0x1f).contains(&c)
}

/// Whether a letter follows `end` (`_ends_word` on the lower-cased text).
#[inline]
fn ends_word(text: &[u8], end: usize) -> bool {
    end == text.len() || !text[end].is_ascii_alphabetic()
}

#[pyclass(frozen, module = "runtrail_native")]
pub struct MarkerScanner {
    automaton: AhoCorasick,
    /// the markers that count only in their own case, pattern indexes 0..cased.len()
    cased: Vec<Vec<u8>>,
    first_suffix: usize,
    dsn_at: usize,
    key_at: usize,
    /// the words after which "key" is a secret's name (`api_key`), lower-case
    qualifiers: Vec<Vec<u8>>,
}

impl MarkerScanner {
    /// `_qualified_key_at`: the "key" at `at` ends a word and follows a qualifier.
    fn qualified_key_at(&self, text: &[u8], at: usize) -> bool {
        if !ends_word(text, at + 3) {
            return false;
        }
        let mut before = at;
        while before > 0 && matches!(text[before - 1], b'-' | b'_' | b'.' | b' ') {
            before -= 1;
        }
        let head = &text[..before];
        self.qualifiers
            .iter()
            .any(|q| head.len() >= q.len() && head[head.len() - q.len()..].eq_ignore_ascii_case(q))
    }
}

/// `_DSN_MARKER` (`://[^\s/@"]*:[^\s/@"]*@`) found anywhere: after some `://`, the longest
/// run of characters it allows holds a `:` and is followed by `@` (neither part can leave
/// that run, and `:` is one of its characters).
fn has_dsn(text: &[u8]) -> bool {
    let mut from = 0;
    while let Some(found) = text[from..].windows(3).position(|w| w == b"://") {
        let start = from + found + 3;
        let mut end = start;
        let mut colon = false;
        while end < text.len() && !matches!(text[end], b'/' | b'@' | b'"') && !is_space(text[end]) {
            colon |= text[end] == b':';
            end += 1;
        }
        if colon && end < text.len() && text[end] == b'@' {
            return true;
        }
        from = from + found + 1;
    }
    false
}

#[pymethods]
impl MarkerScanner {
    #[new]
    fn new(
        patterns: Vec<String>,
        cased: Vec<String>,
        first_suffix: usize,
        dsn_at: usize,
        key_at: usize,
        qualifiers: Vec<String>,
    ) -> PyResult<Self> {
        if patterns
            .iter()
            .any(|p| !p.is_ascii() || p.to_ascii_lowercase() != *p)
        {
            return Err(PyValueError::new_err(
                "the markers must be lower-case ASCII",
            ));
        }
        let automaton = AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .kind(Some(AhoCorasickKind::DFA))
            .build(&patterns)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(MarkerScanner {
            automaton,
            cased: cased.into_iter().map(String::into_bytes).collect(),
            first_suffix,
            dsn_at,
            key_at,
            qualifiers: qualifiers
                .into_iter()
                .map(|q| q.to_ascii_lowercase().into_bytes())
                .collect(),
        })
    }

    /// Whether the ASCII `text` could hold anything the redactor masks; None if not ASCII.
    fn has_marker(&self, py: Python<'_>, text: &[u8]) -> Option<bool> {
        if !text.is_ascii() {
            return None;
        }
        // the scan keeps the GIL: a release per event lets the publisher's threads in mid-call
        let _ = py;
        let mut dsn_checked = false;
        for m in self.automaton.find_overlapping_iter(text) {
            let index = m.pattern().as_usize();
            let (start, end) = (m.start(), m.end());
            let hit = if index < self.cased.len() {
                text[start..].starts_with(&self.cased[index])
            } else if index >= self.first_suffix {
                ends_word(text, end)
            } else if index == self.key_at {
                self.qualified_key_at(text, start)
            } else if index == self.dsn_at {
                !std::mem::replace(&mut dsn_checked, true) && has_dsn(text)
            } else {
                true // a plain or GitHub marker
            };
            if hit {
                return Some(true);
            }
        }
        Some(false)
    }
}
