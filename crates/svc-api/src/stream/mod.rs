//! Streaming response bodies, one module per framing: NDJSON for streamed exec, WebSocket for
//! interactive exec, server-sent events for `/events`. Each turns a control-plane stream into
//! frames as items arrive, never buffering whole outputs.

pub(crate) mod ndjson;
pub(crate) mod sse;
pub(crate) mod ws;

use svc_control::{StdStream, Utf8Chunker};
use svc_core::GoDuration;

/// The message of the final stderr chunk after a deadline.
pub(crate) fn timeout_message(timeout: Option<std::time::Duration>) -> String {
    format!(
        "command timed out after {}\n",
        GoDuration::new(timeout.unwrap_or_default())
    )
}

/// Decodes chunks per stream without splitting characters.
#[derive(Default)]
pub(crate) struct TextDecoder {
    stdout: Utf8Chunker,
    stderr: Utf8Chunker,
}

impl TextDecoder {
    pub(crate) fn decode(&mut self, stream: StdStream, bytes: &[u8]) -> String {
        match stream {
            StdStream::Stdout => self.stdout.push(bytes),
            StdStream::Stderr => self.stderr.push(bytes),
        }
    }

    /// Remaining text of each stream at the end.
    pub(crate) fn finish(&mut self) -> [(StdStream, String); 2] {
        [
            (StdStream::Stdout, self.stdout.finish()),
            (StdStream::Stderr, self.stderr.finish()),
        ]
    }
}

pub(crate) fn stream_name(stream: StdStream) -> &'static str {
    match stream {
        StdStream::Stdout => "stdout",
        StdStream::Stderr => "stderr",
    }
}
