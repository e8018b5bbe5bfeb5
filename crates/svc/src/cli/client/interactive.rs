//! `svc exec -i` / `-t` / `-it`: the command over the exec WebSocket (decisions §8). With `-i`
//! the terminal's input goes to the command (end of input closes its stdin); with `-t` it runs
//! under a pseudo-terminal of this terminal's size, the local terminal is put in raw mode so
//! keys such as Ctrl-C reach the remote side, and SIGWINCH resizes the remote terminal.

use std::process::ExitCode;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{self, Message};

use super::output::{exit_code, write_chunk};
use super::terminal::{self, RawMode};
use super::{Api, ClientError};

/// Runs `start` (the exec's `start` message without its `type`) in sandbox `id`.
pub(crate) async fn run(
    api: &Api,
    id: &str,
    mut start: Value,
    interactive: bool,
    tty: bool,
) -> Result<ExitCode, ClientError> {
    // Raw mode only when a person is typing: a piped stdin has no line discipline to undo.
    let _raw = if tty && terminal::stdin_is_terminal() {
        Some(RawMode::enable()?)
    } else {
        None
    };
    start["type"] = json!("start");
    start["tty"] = json!(tty);
    if tty {
        let (cols, rows) = terminal::size();
        start["cols"] = json!(cols);
        start["rows"] = json!(rows);
    }
    let mut socket = connect(api, id).await?;
    socket.send(Message::text(start.to_string())).await?;

    let mut input = interactive.then(read_stdin);
    let mut resized = if tty {
        Some(
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
                .map_err(|e| ClientError::Transport(format!("watching the window size: {e}")))?,
        )
    } else {
        None
    };
    let mut exit = None;
    loop {
        tokio::select! {
            message = socket.next() => match message {
                Some(Ok(Message::Text(text))) => {
                    if let Some(code) = deliver(text.as_str())? {
                        exit = Some(code);
                    }
                }
                Some(Ok(Message::Close(_))) | None => break,
                Some(Ok(_)) => {}
                Some(Err(err)) => return Err(err.into()),
            },
            chunk = recv(&mut input) => {
                let message = match chunk {
                    Some(data) => json!({"type": "stdin", "data": data}),
                    None => {
                        input = None;
                        json!({"type": "stdin", "data": "", "eof": true})
                    }
                };
                socket.send(Message::text(message.to_string())).await?;
            }
            Some(()) = changed(&mut resized) => {
                let (cols, rows) = terminal::size();
                let message = json!({"type": "resize", "cols": cols, "rows": rows});
                socket.send(Message::text(message.to_string())).await?;
            }
        }
    }
    exit.ok_or_else(|| {
        ClientError::Transport("the connection closed before the command's exit".into())
    })
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens `/exec/ws` of sandbox `id` with the credentials; a refused upgrade carries the server's
/// error body.
async fn connect(api: &Api, id: &str) -> Result<Socket, ClientError> {
    let url = api.url(&format!("/sandboxes/{id}/exec/ws"));
    let url = match url.split_once("://") {
        Some(("https", rest)) => format!("wss://{rest}"),
        Some((_, rest)) => format!("ws://{rest}"),
        None => url,
    };
    let mut request = url.into_client_request()?;
    for (name, value) in api.credentials() {
        let value = HeaderValue::from_str(&value)
            .map_err(|_| ClientError::Transport(format!("the {name} value is not a header")))?;
        request.headers_mut().insert(name, value);
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((socket, _)) => Ok(socket),
        Err(tungstenite::Error::Http(response)) => {
            let status = response.status();
            let body = response.into_body().unwrap_or_default();
            Err(super::refusal_of(status, &String::from_utf8_lossy(&body)))
        }
        Err(err) => Err(err.into()),
    }
}

/// Writes one server message; its exit code when it is the exit message.
fn deliver(text: &str) -> Result<Option<ExitCode>, ClientError> {
    let message: Value = serde_json::from_str(text)
        .map_err(|e| ClientError::Transport(format!("reading a message: {e}")))?;
    match message["type"].as_str().unwrap_or_default() {
        "exit" => return Ok(Some(exit_code(&message))),
        "error" => {
            return Err(ClientError::Refused {
                code: message["code"].as_str().unwrap_or("error").to_owned(),
                message: message["message"].as_str().unwrap_or_default().to_owned(),
            })
        }
        stream => write_chunk(stream, message["data"].as_str().unwrap_or_default()),
    }
    Ok(None)
}

/// Reads stdin on a thread of its own, as text: a blocking read of a terminal never ends by
/// itself, and a detached thread does not hold the process open the way a runtime's blocking
/// task would. A multi-byte character split between two reads is sent whole with the second.
fn read_stdin() -> mpsc::Receiver<String> {
    let (sender, receiver) = mpsc::channel(16);
    std::thread::spawn(move || {
        use std::io::Read;
        let mut stdin = std::io::stdin().lock();
        let mut buffer = [0u8; 4096];
        let mut pending = Vec::new();
        loop {
            let read = match stdin.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            pending.extend_from_slice(&buffer[..read]);
            let text = take_text(&mut pending);
            if !text.is_empty() && sender.blocking_send(text).is_err() {
                return;
            }
        }
        if !pending.is_empty() {
            let _ = sender.blocking_send(String::from_utf8_lossy(&pending).into_owned());
        }
    });
    receiver
}

/// The text of `pending` up to an incomplete character at its end, which stays in `pending`;
/// bytes that are not UTF-8 become U+FFFD, as the server does for output.
fn take_text(pending: &mut Vec<u8>) -> String {
    let keep = match std::str::from_utf8(pending) {
        Ok(_) => 0,
        Err(err) if err.error_len().is_none() => pending.len() - err.valid_up_to(),
        Err(_) => {
            // An invalid byte in the middle: find the last incomplete tail, if any, by decoding
            // the final (at most 3) bytes on their own.
            (1..=3.min(pending.len()))
                .find(|&n| {
                    matches!(std::str::from_utf8(&pending[pending.len() - n..]),
                        Err(e) if e.error_len().is_none() && e.valid_up_to() == 0)
                })
                .unwrap_or(0)
        }
    };
    let tail = pending.split_off(pending.len() - keep);
    let text = String::from_utf8_lossy(pending).into_owned();
    *pending = tail;
    text
}

/// The next stdin chunk; pending forever once stdin is done.
async fn recv(input: &mut Option<mpsc::Receiver<String>>) -> Option<String> {
    match input {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// The next window change; pending forever without a terminal.
async fn changed(signal: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match signal {
        Some(signal) => signal.recv().await,
        None => std::future::pending().await,
    }
}

impl From<tungstenite::Error> for ClientError {
    fn from(err: tungstenite::Error) -> Self {
        ClientError::Transport(format!("websocket: {err}"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::take_text;

    #[test]
    fn a_character_split_between_reads_is_sent_whole() {
        let mut pending = "aé".as_bytes().to_vec();
        pending.pop();
        assert_eq!(take_text(&mut pending), "a");
        assert_eq!(pending, vec![0xc3]);
        pending.push(0xa9);
        pending.push(b'!');
        assert_eq!(take_text(&mut pending), "é!");
        assert!(pending.is_empty());
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut pending = vec![b'x', 0xff, b'y', 0xe2, 0x82];
        assert_eq!(take_text(&mut pending), "x\u{fffd}y");
        assert_eq!(pending, vec![0xe2, 0x82]);
    }
}
