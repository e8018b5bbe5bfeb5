//! `Secret`: a configuration string that never shows in logs or rendered config. `Debug` and
//! `Serialize` write `[redacted]` (or an empty string when unset, so "not configured" stays
//! visible); only [`Secret::expose`] yields the value, which keeps every read of a secret greppable.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What `Debug` and `Serialize` write in place of a non-empty secret.
pub const REDACTED: &str = "[redacted]";

/// A secret string (API key, token, signing key, DSN with a password).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret value itself; call it only where the value is used, never to log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when no secret is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Length of the secret in characters (for strength checks).
    pub fn char_count(&self) -> usize {
        self.0.chars().count()
    }

    /// Compares with `candidate` in time independent of where they differ, so a caller guessing
    /// an API key learns nothing from response timing. An empty secret matches nothing.
    pub fn constant_time_eq(&self, candidate: &str) -> bool {
        let expected = self.0.as_bytes();
        let given = candidate.as_bytes();
        if expected.is_empty() || expected.len() != given.len() {
            return false;
        }
        expected
            .iter()
            .zip(given)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }

    fn rendered(&self) -> &'static str {
        if self.0.is_empty() {
            ""
        } else {
            REDACTED
        }
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Secret(value.to_owned())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.rendered())
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.rendered())
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_is_redacted() {
        let secret = Secret::new("hunter2-very-secret");
        let rendered = format!("{secret:?}");
        assert_eq!(rendered, "\"[redacted]\"");
        assert!(!rendered.contains("hunter2"));
        assert_eq!(format!("{:?}", Secret::default()), "\"\"");
    }

    #[test]
    fn serialize_is_redacted() {
        let secret = Secret::new("hunter2");
        assert_eq!(serde_json::to_string(&secret).unwrap(), "\"[redacted]\"");
        assert_eq!(serde_json::to_string(&Secret::default()).unwrap(), "\"\"");
    }

    #[test]
    fn deserializes_from_string_and_exposes() {
        let secret: Secret = serde_json::from_str("\"hunter2\"").unwrap();
        assert_eq!(secret.expose(), "hunter2");
        assert!(!secret.is_empty());
        assert_eq!(secret.char_count(), 7);
        assert!(serde_json::from_str::<Secret>("42").is_err());
    }

    #[test]
    fn constant_time_eq_matches_exactly() {
        let secret = Secret::new("abc");
        assert!(secret.constant_time_eq("abc"));
        assert!(!secret.constant_time_eq("abd"));
        assert!(!secret.constant_time_eq("ab"));
        assert!(!Secret::default().constant_time_eq(""));
    }
}
