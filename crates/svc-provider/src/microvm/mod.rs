//! The microVM providers (decisions §14): one core, two VMM drivers. The core holds what a
//! guest boots (kernel, the initramfs holding the agent, a root disk per image), how a boot is
//! waited for and watched, and how the host reaches the guest's agent; the drivers start QEMU
//! (`qemu`) or Firecracker (`firecracker`).

mod assets;
pub mod firecracker;
mod host;
mod images;
pub mod initramfs;
mod provider;
pub mod qemu;
pub mod rootfs;
pub mod vm;

pub use assets::{Assets, DEFAULT_ASSETS_DIR};
pub use host::Kvm;
pub use images::RootfsCache;
pub use provider::MicrovmProvider;
