//! NDJSON framing of a running command: `{"stream":"stdout"|"stderr","data":...}` lines as
//! output arrives, then `{"stream":"exit","exit_code":N,"duration":...}`.

use axum::body::{Body, Bytes};
use svc_control::{ExecOutput, RunningExec, StdStream};
use svc_core::GoDuration;

use super::{stream_name, timeout_message, TextDecoder};

/// One NDJSON line; fields in wire order.
#[derive(serde::Serialize)]
struct NdjsonLine<'a> {
    stream: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration: Option<String>,
}

fn ndjson_line(line: &NdjsonLine<'_>) -> Bytes {
    let mut bytes = serde_json::to_vec(line).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

fn chunk_line(stream: StdStream, text: &str) -> Bytes {
    ndjson_line(&NdjsonLine {
        stream: stream_name(stream),
        data: Some(text),
        exit_code: None,
        duration: None,
    })
}

/// The NDJSON body: output lines as they arrive, then the exit line. Dropping it (a client
/// that disconnected) drops the `RunningExec`, which kills the command.
pub(crate) fn exec_body(running: RunningExec) -> Body {
    struct State {
        running: RunningExec,
        decoder: TextDecoder,
        pending: std::collections::VecDeque<Bytes>,
        done: bool,
    }
    let state = State {
        running,
        decoder: TextDecoder::default(),
        pending: std::collections::VecDeque::new(),
        done: false,
    };
    let stream = futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(line) = state.pending.pop_front() {
                return Some((Ok::<_, std::io::Error>(line), state));
            }
            if state.done {
                return None;
            }
            match state.running.next().await? {
                ExecOutput::Chunk(chunk) => {
                    let text = state.decoder.decode(chunk.stream, &chunk.data);
                    if !text.is_empty() {
                        return Some((Ok(chunk_line(chunk.stream, &text)), state));
                    }
                }
                ExecOutput::Ended(ending) => {
                    for (stream, rest) in state.decoder.finish() {
                        if !rest.is_empty() {
                            state.pending.push_back(chunk_line(stream, &rest));
                        }
                    }
                    if ending.timed_out {
                        state.pending.push_back(chunk_line(
                            StdStream::Stderr,
                            &timeout_message(ending.timeout),
                        ));
                    }
                    state.pending.push_back(ndjson_line(&NdjsonLine {
                        stream: "exit",
                        data: None,
                        exit_code: Some(ending.exit_code),
                        duration: Some(GoDuration::new(ending.duration).to_string()),
                    }));
                    state.done = true;
                }
            }
        }
    });
    Body::from_stream(stream)
}
