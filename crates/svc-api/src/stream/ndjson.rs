//! NDJSON framing of a running command: `{"stream":"stdout"|"stderr","data":...}` lines as
//! output arrives, then `{"stream":"exit","exit_code":N,"duration":...}`.

use axum::body::{Body, Bytes};
use futures::stream::BoxStream;
use futures::StreamExt;
use svc_control::{ExecOutput, ExecReplay, RunningExec, StdStream, Utf8Chunker};
use svc_core::exec::exit_code_on_wire;
use svc_core::GoDuration;

use super::{stream_name, timeout_message, TextDecoder};

/// One NDJSON line; fields in wire order.
#[derive(serde::Serialize, Default)]
struct NdjsonLine<'a> {
    stream: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lost: Option<u64>,
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
        ..NdjsonLine::default()
    })
}

fn exit_line(exit_code: Option<i32>, duration: std::time::Duration) -> Bytes {
    ndjson_line(&NdjsonLine {
        stream: "exit",
        exit_code: Some(exit_code_on_wire(exit_code)),
        duration: Some(GoDuration::new(duration).to_string()),
        ..NdjsonLine::default()
    })
}

/// Text of one stream of a replay: characters split across chunks are held until complete,
/// and each line's `offset` is that of its first byte in the raw output.
#[derive(Default)]
struct ReplayText {
    chunker: Utf8Chunker,
    /// Offset of the bytes held back, when there are any.
    held_at: Option<u64>,
}

impl ReplayText {
    fn data(&mut self, stream: StdStream, offset: u64, data: &[u8]) -> Option<Bytes> {
        let starts_at = self.held_at.unwrap_or(offset);
        let text = self.chunker.push(data);
        let held = self.chunker.pending() as u64;
        self.held_at = (held > 0).then(|| offset + data.len() as u64 - held);
        (!text.is_empty()).then(|| offset_line(stream, &text, starts_at))
    }

    /// Held bytes that will never be completed (a gap, or the end) as U+FFFD.
    fn flush(&mut self, stream: StdStream) -> Option<Bytes> {
        let at = self.held_at.take()?;
        let rest = self.chunker.finish();
        (!rest.is_empty()).then(|| offset_line(stream, &rest, at))
    }
}

fn offset_line(stream: StdStream, text: &str, offset: u64) -> Bytes {
    ndjson_line(&NdjsonLine {
        stream: stream_name(stream),
        data: Some(text),
        offset: Some(offset),
        ..NdjsonLine::default()
    })
}

/// The NDJSON body of `GET .../execs/{exec_id}/output`: `{"stream","data","offset"}` lines,
/// `{"stream","lost"}` where bytes were dropped, and the exit line once the exec has ended.
pub(crate) fn replay_body(replay: BoxStream<'static, ExecReplay>) -> Body {
    let mut texts = [ReplayText::default(), ReplayText::default()];
    let index = |stream: StdStream| match stream {
        StdStream::Stdout => 0,
        StdStream::Stderr => 1,
    };
    let lines = replay.flat_map(move |item| {
        let mut lines = Vec::new();
        match item {
            ExecReplay::Lost { stream, bytes } => {
                lines.extend(texts[index(stream)].flush(stream));
                lines.push(ndjson_line(&NdjsonLine {
                    stream: stream_name(stream),
                    lost: Some(bytes),
                    ..NdjsonLine::default()
                }));
            }
            ExecReplay::Data {
                stream,
                offset,
                data,
            } => lines.extend(texts[index(stream)].data(stream, offset, &data)),
            ExecReplay::Exit {
                exit_code,
                duration,
            } => {
                for stream in [StdStream::Stdout, StdStream::Stderr] {
                    lines.extend(texts[index(stream)].flush(stream));
                }
                lines.push(exit_line(exit_code, duration));
            }
        }
        futures::stream::iter(lines.into_iter().map(Ok::<Bytes, std::convert::Infallible>))
    });
    Body::from_stream(lines)
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
                    state
                        .pending
                        .push_back(exit_line(ending.exit_code, ending.duration));
                    state.done = true;
                }
            }
        }
    });
    Body::from_stream(stream)
}
