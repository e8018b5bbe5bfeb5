//! Keyset paging of the list routes (decisions §7): `?limit=` and an opaque `?cursor=`, the next
//! page's cursor in `X-Next-Cursor`. A cursor holds where its page ended in the list's order,
//! never an offset, so items created or deleted meanwhile shift nothing: paging neither skips
//! nor repeats. It also names its route and filters, so it cannot be carried to another list.

use base64::Engine;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use svc_core::Error;

/// The largest page of every list route, and the default of most.
pub const MAX_PAGE: u32 = 1000;

/// A list request's `limit` and `cursor`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageRequest {
    /// At most this many, 1 to [`MAX_PAGE`].
    pub limit: Option<u32>,
    /// Where the previous page ended: its `X-Next-Cursor`.
    pub cursor: Option<String>,
}

impl PageRequest {
    /// Checks the limit (default `default_limit`) and decodes the cursor, which must belong to
    /// `route` and `filter`.
    pub(crate) fn open<K: DeserializeOwned>(
        &self,
        route: &'static str,
        filter: String,
        default_limit: u32,
    ) -> Result<Paging<K>, Error> {
        let limit = self.limit.unwrap_or(default_limit);
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(Error::invalid(
                "limit",
                format!("must be 1 to {MAX_PAGE}, got {limit}"),
            ));
        }
        let after = match self.cursor.as_deref() {
            None | Some("") => None,
            Some(text) => Some(decode(text, route, &filter)?),
        };
        Ok(Paging {
            route,
            filter,
            limit,
            after,
        })
    }
}

/// One page of a list, in the list's order.
#[derive(Debug, Clone)]
pub struct Page<T> {
    /// The items.
    pub items: Vec<T>,
    /// The cursor of the next page; `None` after the last.
    pub next_cursor: Option<String>,
}

/// An opened page request: the limit, and the key the page starts after.
pub(crate) struct Paging<K> {
    route: &'static str,
    filter: String,
    limit: u32,
    /// The sort key of the previous page's last item.
    pub after: Option<K>,
}

impl<K: Serialize> Paging<K> {
    /// How many to fetch: one more than the page tells whether another follows.
    pub fn fetch(&self) -> u32 {
        self.limit + 1
    }

    /// The page of `items` (fetched with [`Paging::fetch`], in list order), its cursor made of
    /// the last item's `key`.
    pub fn finish<T>(self, mut items: Vec<T>, key: impl Fn(&T) -> K) -> Page<T> {
        let more = items.len() > self.limit as usize;
        items.truncate(self.limit as usize);
        let next_cursor = match items.last() {
            Some(last) if more => Some(encode(self.route, self.filter, key(last))),
            _ => None,
        };
        Page { items, next_cursor }
    }
}

impl Paging<String> {
    /// The store's page of a list keyed by a unique name.
    pub fn key_page(&self) -> svc_store::KeyPage {
        svc_store::KeyPage {
            after: self.after.clone(),
            limit: Some(self.fetch()),
        }
    }
}

/// What a cursor holds.
#[derive(Serialize, Deserialize)]
struct Cursor<K> {
    /// The route.
    r: String,
    /// The filters.
    q: String,
    /// The last item's sort key.
    k: K,
}

fn encode<K: Serialize>(route: &str, filter: String, key: K) -> String {
    let cursor = Cursor {
        r: route.to_owned(),
        q: filter,
        k: key,
    };
    let json = serde_json::to_vec(&cursor).unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

fn decode<K: DeserializeOwned>(text: &str, route: &str, filter: &str) -> Result<K, Error> {
    let malformed = || {
        Error::invalid(
            "cursor",
            format!("is not a cursor of GET {route} (use X-Next-Cursor as it came)"),
        )
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| malformed())?;
    let cursor: Cursor<serde_json::Value> =
        serde_json::from_slice(&raw).map_err(|_| malformed())?;
    if cursor.r != route {
        return Err(Error::invalid(
            "cursor",
            format!("is a cursor of GET {}, not of GET {route}", cursor.r),
        ));
    }
    if cursor.q != filter {
        return Err(Error::invalid(
            "cursor",
            "belongs to other filters (keep every filter of the first page as it was)",
        ));
    }
    serde_json::from_value(cursor.k).map_err(|_| malformed())
}

/// A time a cursor holds (microseconds since the epoch).
pub(crate) fn timestamp(micros: i64) -> Result<svc_core::Timestamp, Error> {
    chrono::DateTime::from_timestamp_micros(micros)
        .ok_or_else(|| Error::invalid("cursor", "holds a time out of range"))
}

/// The filters of a request as one cursor field (a JSON array, so no value can pass for two).
pub(crate) fn filter_key(parts: &[Option<&str>]) -> String {
    serde_json::to_string(parts).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(limit: Option<u32>, cursor: Option<String>) -> PageRequest {
        PageRequest { limit, cursor }
    }

    #[test]
    fn cursors_carry_the_key_and_refuse_other_routes_and_filters() {
        let paging: Paging<String> = request(Some(2), None).open("/r", "a".into(), 9).unwrap();
        let page = paging.finish(vec!["x", "y", "z"], |s| s.to_string());
        assert_eq!(page.items, ["x", "y"]);
        let cursor = page.next_cursor.unwrap();

        let next: Paging<String> = request(Some(2), Some(cursor.clone()))
            .open("/r", "a".into(), 9)
            .unwrap();
        assert_eq!(next.after.as_deref(), Some("y"));

        let other_route = request(None, Some(cursor.clone())).open::<String>("/s", "a".into(), 9);
        assert!(other_route.err().unwrap().to_string().contains("GET /r"));
        let other_filter = request(None, Some(cursor)).open::<String>("/r", "b".into(), 9);
        assert!(other_filter.is_err());
        let garbage = request(None, Some("!!".into())).open::<String>("/r", "a".into(), 9);
        assert!(garbage.is_err());
        let wrong_key =
            request(None, Some(encode("/r", "a".into(), 5))).open::<String>("/r", "a".into(), 9);
        assert!(wrong_key.is_err());
    }

    #[test]
    fn limits_outside_one_to_a_thousand_are_refused() {
        for limit in [0, MAX_PAGE + 1] {
            let opened = request(Some(limit), None).open::<String>("/r", String::new(), 9);
            assert!(opened.err().unwrap().to_string().contains("limit"));
        }
        let last_page = request(None, None)
            .open::<String>("/r", String::new(), 9)
            .unwrap();
        assert_eq!(
            last_page.finish(vec![1, 2], |n| n.to_string()).next_cursor,
            None
        );
    }
}
