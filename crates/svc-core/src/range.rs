//! `Range: bytes=...` on file downloads (decisions §9, RFC 9110 §14): one range, so a broken
//! download resumes. A header this does not understand (another unit, several ranges, bad
//! syntax) is ignored and the whole file is sent, as the RFC allows.

/// What a download answers for a `Range` header and a file of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeAnswer {
    /// 200 with every byte.
    Whole,
    /// 206 with bytes `start..=end`.
    Partial {
        /// First byte.
        start: u64,
        /// Last byte, included.
        end: u64,
    },
    /// 416: no byte of the file is in the range.
    Unsatisfiable,
}

impl RangeAnswer {
    /// The answer for `header` (absent: the whole file).
    pub fn for_header(header: Option<&str>, size: u64) -> Self {
        let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
            return RangeAnswer::Whole;
        };
        let spec = spec.trim();
        if spec.contains(',') {
            return RangeAnswer::Whole;
        }
        let Some((first, last)) = spec.split_once('-') else {
            return RangeAnswer::Whole;
        };
        let number = |text: &str| -> Option<Option<u64>> {
            let text = text.trim();
            if text.is_empty() {
                Some(None)
            } else if text.bytes().all(|b| b.is_ascii_digit()) {
                text.parse().ok().map(Some)
            } else {
                None
            }
        };
        let (Some(first), Some(last)) = (number(first), number(last)) else {
            return RangeAnswer::Whole;
        };
        match (first, last) {
            // `bytes=a-b` and `bytes=a-`.
            (Some(start), last) => {
                if last.is_some_and(|last| last < start) {
                    return RangeAnswer::Whole;
                }
                if start >= size {
                    return RangeAnswer::Unsatisfiable;
                }
                let end = last.map_or(size - 1, |last| last.min(size - 1));
                RangeAnswer::Partial { start, end }
            }
            // `bytes=-n`: the last n bytes.
            (None, Some(suffix)) => {
                if suffix == 0 || size == 0 {
                    return RangeAnswer::Unsatisfiable;
                }
                RangeAnswer::Partial {
                    start: size.saturating_sub(suffix),
                    end: size - 1,
                }
            }
            (None, None) => RangeAnswer::Whole,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RangeAnswer::*;

    #[test]
    fn answers_ranges_like_rfc_9110() {
        let size = 100;
        let cases = [
            (None, Whole),
            (Some("bytes=0-9"), Partial { start: 0, end: 9 }),
            (Some("bytes=90-"), Partial { start: 90, end: 99 }),
            (Some("bytes=90-500"), Partial { start: 90, end: 99 }),
            (Some("bytes=-10"), Partial { start: 90, end: 99 }),
            (Some("bytes=-500"), Partial { start: 0, end: 99 }),
            (Some("bytes=99-99"), Partial { start: 99, end: 99 }),
            (Some("bytes=100-"), Unsatisfiable),
            (Some("bytes=200-300"), Unsatisfiable),
            (Some("bytes=-0"), Unsatisfiable),
            (Some("bytes=5-1"), Whole),
            (Some("bytes=0-1,5-6"), Whole),
            (Some("items=0-1"), Whole),
            (Some("bytes=x-1"), Whole),
            (Some("bytes=-"), Whole),
        ];
        for (header, expected) in cases {
            assert_eq!(
                RangeAnswer::for_header(header, size),
                expected,
                "{header:?}"
            );
        }
        assert_eq!(RangeAnswer::for_header(Some("bytes=0-"), 0), Unsatisfiable);
        assert_eq!(RangeAnswer::for_header(Some("bytes=-5"), 0), Unsatisfiable);
    }
}
