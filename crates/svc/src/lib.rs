//! The `svc` service binary as a library: configuration loading, wiring of store, providers and
//! control plane, the HTTP server with graceful shutdown, and the command line. Tests start the
//! real server through [`start`] on an ephemeral port.

pub mod cli;
pub mod config_load;
pub mod logging;
mod server;
mod wiring;

pub use logging::init_test_logging;
pub use server::{serve_with_listener, start, start_with_clock, RunningServer, ShutdownReport};
