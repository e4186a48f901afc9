//! A typed reader of a `config.json` object, field by field: each error names the field and what
//! was expected. A null field reads as absent, as transformers treats `None`.

use serde_json::{Map, Value};

use super::FamilyError;

/// A JSON object and its path from the root (`rope_parameters.` for a nested one).
#[derive(Clone, Copy)]
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
    path: &'a str,
}

impl<'a> Fields<'a> {
    /// The object `value`, its fields named `path` + key.
    pub fn of(value: &'a Value, path: &'a str) -> Result<Fields<'a>, FamilyError> {
        match value {
            Value::Object(map) => Ok(Fields { map, path }),
            _ => Err(FamilyError::Config { field: path.trim_end_matches('.').into(), why: "not an object".into() }),
        }
    }

    /// The full name of field `key`.
    pub fn name(&self, key: &str) -> String {
        format!("{}{key}", self.path)
    }

    /// Field `key`, unless absent or null.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn bad(&self, key: &str, why: impl Into<String>) -> FamilyError {
        FamilyError::Config { field: self.name(key), why: why.into() }
    }

    /// A size: a non-negative integer; absent is an error.
    pub fn size(&self, key: &str) -> Result<usize, FamilyError> {
        self.size_opt(key)?.ok_or_else(|| self.bad(key, "required but absent"))
    }

    /// A size, or `None` when absent.
    pub(crate) fn size_opt(&self, key: &str) -> Result<Option<usize>, FamilyError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()) {
                Some(n) if n <= 1 << 24 => Ok(Some(n)),
                _ => Err(self.bad(key, format!("expected a size, found {v}"))),
            },
        }
    }

    /// A number; absent is an error.
    pub fn number(&self, key: &str) -> Result<f64, FamilyError> {
        self.number_opt(key)?.ok_or_else(|| self.bad(key, "required but absent"))
    }

    /// A number, or `None` when absent.
    pub(crate) fn number_opt(&self, key: &str) -> Result<Option<f64>, FamilyError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| self.bad(key, format!("expected a number, found {v}"))),
        }
    }

    /// A boolean, or `default` when absent.
    pub(crate) fn bool_or(&self, key: &str, default: bool) -> Result<bool, FamilyError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_bool().ok_or_else(|| self.bad(key, format!("expected a boolean, found {v}"))),
        }
    }

    /// A string, or `None` when absent.
    pub(crate) fn str_opt(&self, key: &str) -> Result<Option<&'a str>, FamilyError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| self.bad(key, format!("expected a string, found {v}"))),
        }
    }

    /// A list of strings, or `None` when absent.
    pub(crate) fn strings_opt(&self, key: &str) -> Result<Option<Vec<&'a str>>, FamilyError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().ok_or_else(|| self.bad(key, format!("expected strings, found {v}"))))
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(v) => Err(self.bad(key, format!("expected a list of strings, found {v}"))),
        }
    }

    /// Requires field `key`, when present, to be `want` (a construct the reader does not write).
    pub(crate) fn expect_str(&self, key: &str, want: &str, default: &str) -> Result<(), FamilyError> {
        let found = self.str_opt(key)?.unwrap_or(default);
        if found == want { Ok(()) } else { Err(self.bad(key, format!("expected \"{want}\", found \"{found}\""))) }
    }

    /// Requires field `key` to be absent or null (a construct the reader does not write).
    pub(crate) fn expect_absent(&self, key: &str) -> Result<(), FamilyError> {
        match self.get(key) {
            None => Ok(()),
            Some(v) => Err(self.bad(key, format!("expected null, found {v}: not written"))),
        }
    }
}
