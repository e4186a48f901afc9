//! `Fields`: a JSON object read field by field, with typed errors naming each field's path.

use serde_json::{Map, Value};

use super::ConfigError;

/// The config a family reads: its text config, and the wrapper around it if there is one.
pub struct Source<'a> {
    pub text: Fields<'a>,
    pub wrapper: Option<Fields<'a>>,
}

/// A JSON object and its path from the root, read field by field with typed errors. A null field
/// reads as absent, as transformers treats `None`.
#[derive(Clone)]
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

impl<'a> Fields<'a> {
    /// `value` as an object whose fields are named `path` + key; `field` names it in errors.
    pub fn object(value: &'a Value, path: &str, field: &str) -> Result<Self, ConfigError> {
        match value {
            Value::Object(map) => Ok(Fields { map, path: path.to_string() }),
            other => Err(wrong_type(field.to_string(), "an object", other)),
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

    /// Field `key` read by `read`, which returns `None` when the value is not of the `expected`
    /// type; absent is an error.
    pub fn required<T>(
        &self,
        key: &str,
        read: fn(&'a Value) -> Option<T>,
        expected: &'static str,
    ) -> Result<T, ConfigError> {
        self.optional(key, read, expected)?.ok_or_else(|| ConfigError::Missing { field: self.name(key) })
    }

    /// Field `key` read by `read`, or `None` when absent.
    pub fn optional<T>(
        &self,
        key: &str,
        read: fn(&'a Value) -> Option<T>,
        expected: &'static str,
    ) -> Result<Option<T>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => read(v).map(Some).ok_or_else(|| wrong_type(self.name(key), expected, v)),
        }
    }

    /// Size field `key`: a non-negative integer of at most `limit`; absent is an error.
    pub fn size(&self, key: &str, limit: usize) -> Result<usize, ConfigError> {
        let n = self.required(key, Value::as_u64, "a non-negative integer")?;
        self.bounded(key, n, limit)
    }

    /// Size field `key`, or `default` when absent.
    pub(crate) fn size_or(&self, key: &str, limit: usize, default: usize) -> Result<usize, ConfigError> {
        match self.optional(key, Value::as_u64, "a non-negative integer")? {
            Some(n) => self.bounded(key, n, limit),
            None => Ok(default),
        }
    }

    fn bounded(&self, key: &str, n: u64, limit: usize) -> Result<usize, ConfigError> {
        match usize::try_from(n) {
            Ok(n) if n <= limit => Ok(n),
            _ => Err(ConfigError::BadValue {
                field: self.name(key),
                expected: format!("at most {limit}"),
                found: n.to_string(),
            }),
        }
    }

    /// Number field `key`, if present.
    pub fn number(&self, key: &str) -> Result<Option<f64>, ConfigError> {
        self.optional(key, number_of, "a number")
    }

    /// Boolean field `key`, if present.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        self.optional(key, Value::as_bool, "a boolean")
    }

    /// String field `key`, if present.
    pub fn str(&self, key: &str) -> Result<Option<&'a str>, ConfigError> {
        self.optional(key, Fields::str_of, "a string")
    }

    /// Whether the object holds `key` at all, null included: transformers tells an absent field
    /// (the class default) from a null one (`None`).
    pub fn holds(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// The keys of the object.
    pub fn keys(&self) -> impl Iterator<Item = &'a String> {
        self.map.keys()
    }

    /// The first of `keys` present: its name and its size (at most `limit`).
    pub(crate) fn size_any(&self, keys: &[&str], limit: usize) -> Result<Option<usize>, ConfigError> {
        match keys.iter().find(|k| self.get(k).is_some()) {
            Some(k) => self.size(k, limit).map(Some),
            None => Ok(None),
        }
    }

    /// The first of `keys` present, as a size; absent is an error naming the first key.
    pub(crate) fn size_of_any(&self, keys: &[&str], limit: usize) -> Result<usize, ConfigError> {
        self.size_any(keys, limit)?.ok_or_else(|| ConfigError::Missing { field: self.name(keys[0]) })
    }

    /// The first of `keys` present, as a number.
    pub(crate) fn number_any(&self, keys: &[&str]) -> Result<Option<f64>, ConfigError> {
        match keys.iter().find(|k| self.get(k).is_some()) {
            Some(k) => self.number(k),
            None => Ok(None),
        }
    }

    /// The first of `keys` present, as a string, with its field name.
    pub(crate) fn str_any(&self, keys: &[&str]) -> Result<Option<(String, &'a str)>, ConfigError> {
        match keys.iter().find(|k| self.get(k).is_some()) {
            Some(k) => Ok(self.str(k)?.map(|s| (self.name(k), s))),
            None => Ok(None),
        }
    }

    pub(crate) fn str_of(v: &'a Value) -> Option<&'a str> {
        v.as_str()
    }
}

/// A JSON number, or one of Python's non-finite numbers as the reader marks them.
pub(crate) fn number_of(v: &Value) -> Option<f64> {
    v.as_f64().or_else(|| {
        let s = v.as_str()?;
        super::read::NON_FINITE.iter().find(|(w, ..)| s.strip_prefix('\0') == Some(w)).map(|&(.., x)| x)
    })
}

pub(crate) fn wrong_type(field: String, expected: &'static str, found: &Value) -> ConfigError {
    ConfigError::WrongType { field, expected, found: describe(found) }
}

/// A short description of a JSON value for an error: its kind, and its text when short.
pub fn describe(v: &Value) -> String {
    let kind = match v {
        Value::Null => return "null".into(),
        Value::Bool(b) => return b.to_string(),
        Value::Number(_) => "the number",
        Value::String(s) if s.starts_with('\0') => return format!("the number {}", &s[1..]),
        Value::String(_) => "the string",
        Value::Array(a) => return format!("an array of {} entries", a.len()),
        Value::Object(_) => return "an object".into(),
    };
    let text = v.to_string();
    let short: String = text.chars().take(40).collect();
    let ellipsis = if short.len() < text.len() { "…" } else { "" };
    format!("{kind} {short}{ellipsis}")
}
