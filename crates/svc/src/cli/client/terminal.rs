//! The local terminal: raw mode for the length of an interactive exec, and its size.

use std::io::IsTerminal;

use rustix::termios::{self, OptionalActions, Termios};

use super::ClientError;

/// Whether stdin is a terminal.
pub(crate) fn stdin_is_terminal() -> bool {
    std::io::stdin().is_terminal()
}

/// The terminal's `(cols, rows)`, from whichever of stdin, stdout or stderr is one; 80x24
/// otherwise.
pub(crate) fn size() -> (u16, u16) {
    let from = |size: rustix::io::Result<termios::Winsize>| {
        size.ok()
            .filter(|s| s.ws_col > 0 && s.ws_row > 0)
            .map(|s| (s.ws_col, s.ws_row))
    };
    from(termios::tcgetwinsize(std::io::stdin()))
        .or_else(|| from(termios::tcgetwinsize(std::io::stdout())))
        .or_else(|| from(termios::tcgetwinsize(std::io::stderr())))
        .unwrap_or((80, 24))
}

/// Stdin in raw mode until dropped, when its settings are put back (also on errors, since the
/// guard lives on the stack of the command).
pub(crate) struct RawMode {
    saved: Termios,
}

impl RawMode {
    pub(crate) fn enable() -> Result<Self, ClientError> {
        let failed = |e: rustix::io::Errno| {
            ClientError::Transport(format!("putting the terminal in raw mode: {e}"))
        };
        let saved = termios::tcgetattr(std::io::stdin()).map_err(failed)?;
        let mut raw = saved.clone();
        raw.make_raw();
        termios::tcsetattr(std::io::stdin(), OptionalActions::Now, &raw).map_err(failed)?;
        Ok(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin(), OptionalActions::Now, &self.saved);
    }
}
