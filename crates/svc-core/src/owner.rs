//! Owner identifiers (`X-User-ID`, spawn `owner_id`): trimmed, 1..=128 characters, no whitespace,
//! control characters or path separators (interface Limits; decisions §5).

use std::fmt;

use serde::{Deserialize, Serialize};

const MAX_CHARS: usize = 128;

/// A validated owner ID.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct OwnerId(String);

/// Why an owner ID was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidOwnerId {
    /// Empty after trimming.
    #[error("owner id is empty")]
    Empty,
    /// Longer than 128 characters.
    #[error("owner id is longer than 128 characters")]
    TooLong,
    /// Contains whitespace, a control character or a path separator.
    #[error("owner id must not contain whitespace, control characters or path separators")]
    ForbiddenCharacter,
}

impl OwnerId {
    /// Trims and validates.
    pub fn parse(input: &str) -> Result<Self, InvalidOwnerId> {
        let trimmed = input.trim();
        if trimmed.is_empty() {
            return Err(InvalidOwnerId::Empty);
        }
        if trimmed.chars().count() > MAX_CHARS {
            return Err(InvalidOwnerId::TooLong);
        }
        if trimmed
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '/' || c == '\\')
        {
            return Err(InvalidOwnerId::ForbiddenCharacter);
        }
        Ok(OwnerId(trimmed.to_owned()))
    }

    /// The ID as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for OwnerId {
    type Error = InvalidOwnerId;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        OwnerId::parse(&value)
    }
}

impl From<OwnerId> for String {
    fn from(id: OwnerId) -> Self {
        id.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn validates_owner_ids() {
        assert_eq!(OwnerId::parse("  alice ").unwrap().as_str(), "alice");
        assert_eq!(
            OwnerId::parse(&"a".repeat(128)).unwrap().as_str().len(),
            128
        );
        assert_eq!(
            OwnerId::parse(&"a".repeat(129)),
            Err(InvalidOwnerId::TooLong)
        );
        assert_eq!(OwnerId::parse("   "), Err(InvalidOwnerId::Empty));
        for bad in ["a b", "a/b", "a\\b", "a\u{7}b", "a\tb", "a\u{a0}b"] {
            assert_eq!(
                OwnerId::parse(bad),
                Err(InvalidOwnerId::ForbiddenCharacter),
                "{bad:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn accepted_ids_are_clean(input in "\\PC{0,140}") {
            if let Ok(id) = OwnerId::parse(&input) {
                let s = id.as_str();
                prop_assert!(!s.is_empty() && s.chars().count() <= 128);
                prop_assert!(!s.chars().any(|c| c.is_whitespace() || c.is_control() || c == '/' || c == '\\'));
            }
        }
    }
}
