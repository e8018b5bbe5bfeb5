//! Domain types and pure rules of svc. Nothing here performs I/O: every other crate builds on
//! these types, so they stay small, validated at construction and serialisable with their wire
//! names.

pub mod access;
pub mod admission;
pub mod audit;
pub mod build;
pub mod capability;
pub mod clock;
pub mod config;
pub mod duration;
pub mod egress;
pub mod empty_as_none;
pub mod error;
pub mod event;
pub mod exec;
pub mod glob;
pub mod id;
pub mod observe;
pub mod owner;
pub mod path;
pub mod quota;
pub mod range;
pub mod rpc;
pub mod sandbox;
pub mod template;
pub mod tenant;
pub mod worker;

pub use capability::Capability;
pub use clock::{Clock, ManualClock, SystemClock, Timestamp};
pub use duration::GoDuration;
pub use error::{Error, ErrorKind};
pub use id::{BuildId, ExecId, SandboxId};
pub use owner::OwnerId;
