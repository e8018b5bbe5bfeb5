//! A command's output as the client receives it, shared by `svc exec` (NDJSON or WebSocket)
//! and `svc mcp`: NDJSON lines read as they arrive, chunks written to this process's own
//! stdout and stderr, and the exit code.

use std::io::Write;
use std::process::ExitCode;

use futures::StreamExt;
use serde_json::Value;

use super::ClientError;

/// The JSON lines of an NDJSON answer, each as soon as its newline arrives.
pub(crate) struct NdjsonLines {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    pending: Vec<u8>,
}

impl NdjsonLines {
    pub(crate) fn new(response: reqwest::Response) -> Self {
        NdjsonLines {
            body: response.bytes_stream().boxed(),
            pending: Vec::new(),
        }
    }

    /// The next line, or `None` at the end of the answer.
    pub(crate) async fn next(&mut self) -> Option<Result<Value, ClientError>> {
        loop {
            if let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                return Some(
                    serde_json::from_slice(&line)
                        .map_err(|e| ClientError::Transport(format!("reading the output: {e}"))),
                );
            }
            match self.body.next().await? {
                Ok(chunk) => self.pending.extend_from_slice(&chunk),
                Err(err) => return Some(Err(err.into())),
            }
        }
    }
}

/// Writes a `stdout` or `stderr` chunk to this process's stream of the same name, flushed so
/// it shows as it comes; other names are ignored.
pub(crate) fn write_chunk(stream: &str, data: &str) {
    let result = match stream {
        "stdout" => {
            let mut out = std::io::stdout().lock();
            out.write_all(data.as_bytes()).and_then(|()| out.flush())
        }
        "stderr" => {
            let mut err = std::io::stderr().lock();
            err.write_all(data.as_bytes()).and_then(|()| err.flush())
        }
        _ => Ok(()),
    };
    // A closed stdout (`svc exec ... | head`) must not stop the command's exit code.
    let _ = result;
}

/// The `exit_code` of an exit message (1 when missing), wrapped to 0..=255 like a shell's.
pub(crate) fn exit_code(message: &Value) -> ExitCode {
    let code = message["exit_code"].as_i64().unwrap_or(1);
    ExitCode::from((code & 0xff) as u8)
}
