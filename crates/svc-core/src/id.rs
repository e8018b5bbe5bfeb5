//! Identifiers: a prefix and 16 lowercase hex characters from a CSPRNG (decisions §3, §8):
//! sandboxes `sb-`, execs `ex-`, template builds `bd-`.

use std::fmt;

use rand::Rng;
use serde::{Deserialize, Serialize};

const HEX_LEN: usize = 16;

/// A string that is not an ID of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} id {value:?}: expected {prefix} followed by 16 lowercase hex characters")]
pub struct InvalidId {
    /// `sandbox` or `exec`.
    pub kind: &'static str,
    /// The prefix expected.
    pub prefix: &'static str,
    /// What was given.
    pub value: String,
}

macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $prefix:literal, $example:literal, $resource:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// A fresh random ID.
            pub fn generate() -> Self {
                let bytes: [u8; HEX_LEN / 2] = rand::rng().random();
                $name(format!("{}{}", $prefix, hex::encode(bytes)))
            }

            /// Validates an ID received from outside.
            pub fn parse(input: &str) -> Result<Self, InvalidId> {
                let valid = input.strip_prefix($prefix).is_some_and(|hex| {
                    hex.len() == HEX_LEN && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
                });
                if valid {
                    Ok($name(input.to_owned()))
                } else {
                    Err(InvalidId {
                        kind: $kind,
                        prefix: $prefix,
                        value: input.to_owned(),
                    })
                }
            }

            /// An ID a caller named (in a path or a host name): a malformed one names nothing,
            /// so it is not found, like a well-formed one that does not exist.
            pub fn named(input: &str) -> Result<Self, crate::Error> {
                Self::parse(input)
                    .map_err(|_| crate::Error::not_found(crate::error::Resource::$resource, input))
            }

            /// The ID as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidId;
            fn try_from(value: String) -> Result<Self, Self::Error> {
                $name::parse(&value)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> Self {
                id.0
            }
        }

        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .pattern(Some(concat!("^", $prefix, "[0-9a-f]{16}$")))
                    .examples([serde_json::json!($example)])
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {}
    };
}

prefixed_id!(
    /// A validated sandbox ID.
    SandboxId,
    "sandbox",
    "sb-",
    "sb-0123456789abcdef",
    Sandbox
);

prefixed_id!(
    /// A validated exec ID (decisions §8, "Exec jobs").
    ExecId,
    "exec",
    "ex-",
    "ex-0123456789abcdef",
    Exec
);

prefixed_id!(
    /// A validated template build ID (decisions §17, "Template builds").
    BuildId,
    "build",
    "bd-",
    "bd-0123456789abcdef",
    Build
);

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

    #[test]
    fn a_malformed_named_id_is_not_found_as_its_kind() {
        let id = SandboxId::generate();
        assert_eq!(SandboxId::named(id.as_str()).unwrap(), id);
        for (err, resource) in [
            (
                SandboxId::named("sb-nope").unwrap_err(),
                crate::error::Resource::Sandbox,
            ),
            (
                ExecId::named("../x").unwrap_err(),
                crate::error::Resource::Exec,
            ),
            (
                BuildId::named("").unwrap_err(),
                crate::error::Resource::Build,
            ),
        ] {
            assert_eq!(err.kind(), crate::ErrorKind::NotFound, "{err}");
            assert!(
                matches!(&err, crate::Error::NotFound { resource: r, .. } if *r == resource),
                "{err:?}"
            );
        }
    }

    #[test]
    fn exec_ids_have_their_own_prefix() {
        let id = ExecId::generate();
        assert!(id.as_str().starts_with("ex-") && id.as_str().len() == 19);
        assert_eq!(ExecId::parse(id.as_str()), Ok(id));
        let err = ExecId::parse("sb-0123456789abcdef").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid exec id \"sb-0123456789abcdef\": expected ex- followed by 16 lowercase hex characters"
        );
    }
}
