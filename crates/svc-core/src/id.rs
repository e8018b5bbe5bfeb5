//! Sandbox identifiers: `sb-` followed by 16 lowercase hex characters from a CSPRNG (decisions §3).

use std::fmt;

use rand::Rng;
use serde::{Deserialize, Serialize};

const PREFIX: &str = "sb-";
const HEX_LEN: usize = 16;

/// A validated sandbox ID.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SandboxId(String);

/// A string that is not a sandbox ID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid sandbox id {0:?}: expected sb- followed by 16 lowercase hex characters")]
pub struct InvalidSandboxId(pub String);

impl SandboxId {
    /// A fresh random ID.
    pub fn generate() -> Self {
        let bytes: [u8; HEX_LEN / 2] = rand::rng().random();
        SandboxId(format!("{PREFIX}{}", hex::encode(bytes)))
    }

    /// Validates an ID received from outside.
    pub fn parse(input: &str) -> Result<Self, InvalidSandboxId> {
        let valid = input.strip_prefix(PREFIX).is_some_and(|hex| {
            hex.len() == HEX_LEN && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        });
        if valid {
            Ok(SandboxId(input.to_owned()))
        } else {
            Err(InvalidSandboxId(input.to_owned()))
        }
    }

    /// The ID as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SandboxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for SandboxId {
    type Error = InvalidSandboxId;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        SandboxId::parse(&value)
    }
}

impl From<SandboxId> for String {
    fn from(id: SandboxId) -> Self {
        id.0
    }
}

impl utoipa::PartialSchema for SandboxId {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some("^sb-[0-9a-f]{16}$"))
            .examples([serde_json::json!("sb-0123456789abcdef")])
            .into()
    }
}

impl utoipa::ToSchema for SandboxId {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_parse_and_differ() {
        let a = SandboxId::generate();
        let b = SandboxId::generate();
        assert_ne!(a, b);
        assert_eq!(SandboxId::parse(a.as_str()), Ok(a.clone()));
        assert_eq!(a.as_str().len(), 19);
    }

    #[test]
    fn rejects_malformed_ids() {
        for bad in [
            "",
            "sb-",
            "sb-0123456789ABCDEF",
            "sb-0123456789abcde",
            "xx-0123456789abcdef",
            "sb-0123456789abcdefa",
            "sb-../../etc/passwd",
        ] {
            assert!(SandboxId::parse(bad).is_err(), "{bad}");
        }
    }
}
