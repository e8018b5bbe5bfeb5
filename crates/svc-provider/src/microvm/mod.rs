//! The microVM core shared by the `qemu` and `firecracker` providers (decisions §14): what a
//! guest boots (kernel, the initramfs holding the agent, a root disk per image) and how the host
//! reaches its agent.

pub mod initramfs;
pub mod qemu;
pub mod rootfs;
