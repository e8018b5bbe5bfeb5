//! The configuration reference (`docs/configuration.md`) is tied to the code: every key of
//! [`Config`] is documented with its default, and every documented key exists with that default.

use serde_json::Value;

use super::Config;
use crate::GoDuration;

const REFERENCE: &str = include_str!("../../../../docs/configuration.md");

/// The documented `(key, default)` rows: a key path in the first cell, its default as the
/// first backquoted value of the second.
fn documented() -> Vec<(String, String)> {
    REFERENCE
        .lines()
        .filter_map(|line| {
            let mut cells = line.strip_prefix('|')?.split('|').map(str::trim);
            let key = cells.next()?;
            let is_key = key.contains('.')
                && key
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.');
            if !is_key {
                return None;
            }
            let default = cells.next()?;
            let value = default.strip_prefix('`')?.split('`').next()?;
            Some((key.to_owned(), value.to_owned()))
        })
        .collect()
}

/// Every leaf of `value` under its dotted path (lists and empty maps are leaves).
fn flatten(prefix: &str, value: &Value, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten(&path, child, out);
            }
        }
        leaf => out.push((prefix.to_owned(), leaf.clone())),
    }
}

/// Whether the documented text shows `value`: JSON as written (numbers, booleans, lists,
/// `""`), else the text of a string, or the same duration however written (`60s`, `1m0s`).
fn shows(documented: &str, value: &Value) -> bool {
    if serde_json::from_str::<Value>(documented).is_ok_and(|parsed| parsed == *value) {
        return true;
    }
    let Some(text) = value.as_str() else {
        return false;
    };
    let duration = |t: &str| t.parse::<GoDuration>().ok();
    text == documented || duration(text).is_some_and(|d| duration(documented) == Some(d))
}

#[test]
fn the_reference_documents_every_key_with_its_default() {
    let mut keys = Vec::new();
    flatten(
        "",
        &serde_json::to_value(Config::default()).expect("the configuration serializes"),
        &mut keys,
    );
    let documented = documented();
    let mut problems = Vec::new();
    for (key, value) in &keys {
        match documented.iter().find(|(k, _)| k == key) {
            None => problems.push(format!(
                "{key} (default {value}) is not in docs/configuration.md"
            )),
            Some((_, text)) if !shows(text, value) => problems.push(format!(
                "{key}: docs/configuration.md says `{text}`, the code's default is {value}"
            )),
            Some(_) => {}
        }
    }
    for (key, _) in &documented {
        if !keys.iter().any(|(k, _)| k == key) {
            problems.push(format!(
                "{key} is documented but the configuration has no such key"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
