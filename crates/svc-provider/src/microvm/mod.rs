//! The microVM core shared by the `qemu` and `firecracker` providers (decisions §14): what a
//! guest boots (kernel, the initramfs holding the agent, a root disk per image) and how the host
//! reaches its agent.

mod assets;
mod images;
pub mod initramfs;
mod provider;
pub mod qemu;
pub mod rootfs;

pub use assets::{Assets, DEFAULT_ASSETS_DIR};
pub use images::RootfsCache;
pub use provider::QemuProvider;
