//! Turns a byte stream into text chunks that never split a UTF-8 character; invalid bytes
//! become U+FFFD (decisions §8).

/// Per-stream decoder state: the bytes of an incomplete trailing character.
#[derive(Debug, Default)]
pub struct Utf8Chunker {
    carry: Vec<u8>,
}

impl Utf8Chunker {
    /// Decodes `bytes` after what was carried; an incomplete character at the end is kept for
    /// the next call.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        let mut input = std::mem::take(&mut self.carry);
        input.extend_from_slice(bytes);
        let mut out = String::with_capacity(input.len());
        let mut rest: &[u8] = &input;
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    out.push_str(valid);
                    break;
                }
                Err(err) => {
                    let (valid, after) = rest.split_at(err.valid_up_to());
                    // The prefix was just validated.
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match err.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                        None => {
                            self.carry = after.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        out
    }

    /// Bytes held back: the start of a character whose rest has not arrived.
    pub fn pending(&self) -> usize {
        self.carry.len()
    }

    /// What is left at the end of the stream (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        if self.carry.is_empty() {
            String::new()
        } else {
            self.carry.clear();
            char::REPLACEMENT_CHARACTER.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_splits_characters() {
        let text = "héllo ✓ 🎉";
        let bytes = text.as_bytes();
        for split in 0..=bytes.len() {
            let mut chunker = Utf8Chunker::default();
            let mut out = chunker.push(&bytes[..split]);
            out.push_str(&chunker.push(&bytes[split..]));
            out.push_str(&chunker.finish());
            assert_eq!(out, text, "split at {split}");
        }
    }

    #[test]
    fn replaces_invalid_bytes() {
        let mut chunker = Utf8Chunker::default();
        assert_eq!(chunker.push(b"a\xffb"), "a\u{fffd}b");
        assert_eq!(chunker.push(b"\xe2\x9c"), "");
        assert_eq!(chunker.finish(), "\u{fffd}");
    }
}
