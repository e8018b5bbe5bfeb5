//! Serde for an optional identifier the wire spells as a string, `""` standing for none (an
//! event's `sandbox_id`, an anonymous `owner_id`). Inside svc it is an `Option`; use with
//! `#[serde(with = "svc_core::empty_as_none")]`.

use std::fmt::Display;

use serde::{Deserialize, Deserializer, Serializer};

/// `""` for none, else the value as text.
pub fn serialize<T: Display, S: Serializer>(value: &Option<T>, out: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => out.collect_str(value),
        None => out.serialize_str(""),
    }
}

/// `""` is none; anything else must be a valid `T`.
pub fn deserialize<'de, T, D>(input: D) -> Result<Option<T>, D::Error>
where
    T: TryFrom<String>,
    T::Error: Display,
    D: Deserializer<'de>,
{
    let text = String::deserialize(input)?;
    if text.is_empty() {
        return Ok(None);
    }
    T::try_from(text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use crate::{OwnerId, SandboxId};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Named {
        #[serde(with = "super")]
        owner_id: Option<OwnerId>,
        #[serde(with = "super")]
        sandbox_id: Option<SandboxId>,
    }

    #[test]
    fn none_is_an_empty_string_on_the_wire() {
        let none = Named {
            owner_id: None,
            sandbox_id: None,
        };
        let some = Named {
            owner_id: Some(OwnerId::parse("alice").unwrap()),
            sandbox_id: Some(SandboxId::parse("sb-0123456789abcdef").unwrap()),
        };
        for (value, wire) in [
            (&none, r#"{"owner_id":"","sandbox_id":""}"#),
            (
                &some,
                r#"{"owner_id":"alice","sandbox_id":"sb-0123456789abcdef"}"#,
            ),
        ] {
            assert_eq!(serde_json::to_string(value).unwrap(), wire);
            assert_eq!(&serde_json::from_str::<Named>(wire).unwrap(), value);
        }
        let refused =
            serde_json::from_str::<Named>(r#"{"owner_id":"a b","sandbox_id":""}"#).unwrap_err();
        assert!(refused.to_string().contains("whitespace"), "{refused}");
    }
}
