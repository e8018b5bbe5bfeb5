//! Owner quotas (interface "Owner quota"; decisions §10): per-owner overrides of the global
//! limits. A zero field inherits the global value, so "no quota" and "a quota of zeros" limit the
//! same way; only `quota_configured` tells them apart.

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::duration::GoDuration;
use crate::Error;

/// A stored owner quota.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OwnerQuota {
    /// The owner it applies to.
    pub owner_id: String,
    /// Sandboxes the owner may hold at once; `0` inherits `defaults.max_sandboxes_per_owner`.
    pub max_sandboxes: u64,
    /// Longest sandbox lifetime; `0s` inherits `defaults.max_ttl`.
    #[schema(value_type = String, example = "1h0m0s")]
    pub max_ttl: GoDuration,
    /// Longest command deadline; `0s` inherits `defaults.max_exec_timeout`.
    #[schema(value_type = String, example = "5m0s")]
    pub max_exec_timeout: GoDuration,
    /// When the quota was first saved.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// When it was last saved.
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

/// `PUT /quotas/{ownerID}` body. Counts arrive signed so a negative one is refused by name
/// rather than as a type mismatch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct QuotaRequest {
    /// Integer >= 0; `0` or omitted inherits the global value.
    pub max_sandboxes: Option<i64>,
    /// Whole-second duration; `0s` or omitted inherits the global value.
    #[schema(value_type = Option<String>, example = "1h")]
    pub max_ttl: Option<GoDuration>,
    /// Whole-second duration; `0s` or omitted inherits the global value.
    #[schema(value_type = Option<String>, example = "5m")]
    pub max_exec_timeout: Option<GoDuration>,
}

/// A validated quota request: what is stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaLimits {
    /// See [`OwnerQuota::max_sandboxes`].
    pub max_sandboxes: u64,
    /// See [`OwnerQuota::max_ttl`].
    pub max_ttl: GoDuration,
    /// See [`OwnerQuota::max_exec_timeout`].
    pub max_exec_timeout: GoDuration,
}

impl QuotaRequest {
    /// Checks every field (decisions §10), naming the first that is wrong.
    pub fn validate(&self) -> Result<QuotaLimits, Error> {
        let max_sandboxes = match self.max_sandboxes {
            None => 0,
            Some(n) => u64::try_from(n).map_err(|_| {
                Error::invalid(
                    "max_sandboxes",
                    format!("must be an integer >= 0 (0 inherits the global limit), got {n}"),
                )
            })?,
        };
        Ok(QuotaLimits {
            max_sandboxes,
            max_ttl: whole_seconds("max_ttl", self.max_ttl)?,
            max_exec_timeout: whole_seconds("max_exec_timeout", self.max_exec_timeout)?,
        })
    }
}

fn whole_seconds(field: &str, value: Option<GoDuration>) -> Result<GoDuration, Error> {
    let value = value.unwrap_or(GoDuration::ZERO);
    if !value.is_whole_seconds() {
        return Err(Error::invalid(
            field,
            format!("must be a whole number of seconds such as 30s or 1h (0s inherits the global limit), got {value}"),
        ));
    }
    Ok(value)
}

/// `GET /quotas/summary`: counts only, never owner IDs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QuotaSummary {
    /// Owners with a quota.
    pub total: u64,
    /// Quotas with a non-zero `max_sandboxes`.
    pub with_max_sandboxes: u64,
    /// Quotas with a non-zero `max_ttl`.
    pub with_max_ttl: u64,
    /// Quotas with a non-zero `max_exec_timeout`.
    pub with_max_exec_timeout: u64,
}

/// `GET /quotas/{ownerID}/usage`: what the owner holds and the limits in force for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OwnerUsage {
    /// The owner.
    pub owner_id: String,
    /// Sandboxes the owner holds (`creating` or `running`).
    pub active_sandboxes: u64,
    /// Effective per-owner sandbox limit (`0` = unlimited).
    pub max_sandboxes: u64,
    /// Effective maximum lifetime (`0s` = unlimited).
    #[schema(value_type = String, example = "24h0m0s")]
    pub max_ttl: GoDuration,
    /// Effective maximum exec deadline (`0s` = unlimited).
    #[schema(value_type = String, example = "10m0s")]
    pub max_exec_timeout: GoDuration,
    /// True when the owner has a stored quota.
    pub quota_configured: bool,
}

/// The global limits (`defaults.*`) a quota overrides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GlobalLimits {
    /// `defaults.max_sandboxes`.
    pub max_sandboxes: u64,
    /// `defaults.max_sandboxes_per_owner`.
    pub max_sandboxes_per_owner: u64,
    /// `defaults.max_ttl`.
    pub max_ttl: GoDuration,
    /// `defaults.max_exec_timeout`.
    pub max_exec_timeout: GoDuration,
}

/// The limits in force for one owner: its quota's non-zero values, else the global ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EffectiveLimits {
    /// Global sandbox capacity (no owner overrides it).
    pub max_sandboxes: u64,
    /// The owner's sandbox limit.
    pub max_owner_sandboxes: u64,
    /// The owner's maximum lifetime.
    pub max_ttl: GoDuration,
    /// The owner's maximum exec deadline.
    pub max_exec_timeout: GoDuration,
}

impl GlobalLimits {
    /// The limits for an owner with `quota` (decisions §10: owner value when set and non-zero).
    pub fn effective(&self, quota: Option<&QuotaLimits>) -> EffectiveLimits {
        let quota = quota.copied().unwrap_or_default();
        let pick = |own: GoDuration, global: GoDuration| if own.is_zero() { global } else { own };
        EffectiveLimits {
            max_sandboxes: self.max_sandboxes,
            max_owner_sandboxes: if quota.max_sandboxes == 0 {
                self.max_sandboxes_per_owner
            } else {
                quota.max_sandboxes
            },
            max_ttl: pick(quota.max_ttl, self.max_ttl),
            max_exec_timeout: pick(quota.max_exec_timeout, self.max_exec_timeout),
        }
    }
}

impl OwnerQuota {
    /// The stored limits.
    pub fn limits(&self) -> QuotaLimits {
        QuotaLimits {
            max_sandboxes: self.max_sandboxes,
            max_ttl: self.max_ttl,
            max_exec_timeout: self.max_exec_timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(json: &str) -> Result<QuotaLimits, String> {
        let request: QuotaRequest = serde_json::from_str(json).map_err(|e| e.to_string())?;
        request.validate().map_err(|e| e.to_string())
    }

    #[test]
    fn validates_each_field_by_name() {
        assert_eq!(request("{}").unwrap(), QuotaLimits::default());
        let ok = request(r#"{"max_sandboxes":3,"max_ttl":"1.5h","max_exec_timeout":"0"}"#).unwrap();
        assert_eq!(ok.max_sandboxes, 3);
        assert_eq!(ok.max_ttl, GoDuration::from_secs(5400));
        assert!(ok.max_exec_timeout.is_zero());
        for (body, field) in [
            (r#"{"max_sandboxes":-1}"#, "max_sandboxes"),
            (r#"{"max_ttl":"500ms"}"#, "max_ttl"),
            (r#"{"max_ttl":"1.5s"}"#, "max_ttl"),
            (r#"{"max_exec_timeout":"2500ms"}"#, "max_exec_timeout"),
        ] {
            let err = request(body).unwrap_err();
            assert!(err.starts_with(field), "{body}: {err}");
        }
        for body in [
            r#"{"max_ttl":"-5s"}"#,
            r#"{"max_ttl":"soon"}"#,
            r#"{"max_sandboxes":1.5}"#,
            r#"{"max_sandboxes":"2"}"#,
        ] {
            assert!(request(body).is_err(), "{body}");
        }
    }

    #[test]
    fn a_saved_quota_can_be_put_back_as_it_was_read() {
        let read = r#"{"owner_id":"a","max_sandboxes":2,"max_ttl":"1h0m0s","max_exec_timeout":"0s",
            "created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}"#;
        assert_eq!(request(read).unwrap().max_ttl, GoDuration::from_secs(3600));
    }

    #[test]
    fn owner_values_override_only_when_non_zero() {
        let global = GlobalLimits {
            max_sandboxes: 10,
            max_sandboxes_per_owner: 2,
            max_ttl: GoDuration::from_secs(3600),
            max_exec_timeout: GoDuration::from_secs(60),
        };
        let none = global.effective(None);
        assert_eq!(none.max_owner_sandboxes, 2);
        assert_eq!(none.max_ttl, GoDuration::from_secs(3600));
        let quota = QuotaLimits {
            max_sandboxes: 5,
            max_ttl: GoDuration::ZERO,
            max_exec_timeout: GoDuration::from_secs(600),
        };
        let own = global.effective(Some(&quota));
        assert_eq!(own.max_sandboxes, 10, "global capacity is never overridden");
        assert_eq!(own.max_owner_sandboxes, 5);
        assert_eq!(own.max_ttl, GoDuration::from_secs(3600));
        assert_eq!(own.max_exec_timeout, GoDuration::from_secs(600));
    }
}
