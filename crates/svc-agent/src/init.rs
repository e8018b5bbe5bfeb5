//! The agent as a microVM's init (PID 1). The kernel starts it from a small initramfs (the agent
//! and the modules the guest needs: virtio-mmio, the virtio block device, vsock), because the
//! root disk's driver is itself a module. It mounts the pseudo-filesystems, loads the modules in
//! order, mounts the root disk named by `svc.root=` and switches into it, sets the clock, starts
//! itself again as the server, and from then on only reaps: every orphan in the guest becomes
//! its child, and a server that dies is started again.
//! The server runs as a child so that its own runtime reaps the commands it starts; PID 1 reaping
//! with `wait(-1)` alongside it would steal their exit statuses.

use std::ffi::CString;
use std::path::Path;
use std::time::Duration;

use rustix::fs::{Mode, OFlags};
use rustix::mount::MountFlags;

/// Where the root filesystem builder puts the modules to load, with their order in `order`.
pub(crate) const MODULES_DIR: &str = "/svc/modules";

fn log(message: &str) {
    eprintln!("svc-agent: {message}");
}

type Mount = (&'static str, &'static str, &'static str, MountFlags);

/// What the initramfs needs, moved into the root disk after the switch.
const EARLY: [Mount; 3] = [
    (
        "proc",
        "/proc",
        "proc",
        MountFlags::NOSUID
            .union(MountFlags::NODEV)
            .union(MountFlags::NOEXEC),
    ),
    (
        "sysfs",
        "/sys",
        "sysfs",
        MountFlags::NOSUID
            .union(MountFlags::NODEV)
            .union(MountFlags::NOEXEC),
    ),
    ("devtmpfs", "/dev", "devtmpfs", MountFlags::NOSUID),
];

/// What programs expect besides, mounted in the final root.
const LATE: [Mount; 3] = [
    (
        "devpts",
        "/dev/pts",
        "devpts",
        MountFlags::NOSUID.union(MountFlags::NOEXEC),
    ),
    (
        "tmpfs",
        "/run",
        "tmpfs",
        MountFlags::NOSUID.union(MountFlags::NODEV),
    ),
    (
        "tmpfs",
        "/tmp",
        "tmpfs",
        MountFlags::NOSUID.union(MountFlags::NODEV),
    ),
];

/// Mounts `mounts`; one that is already there (a kernel that mounted devtmpfs itself) is fine.
fn mount_all(mounts: &[Mount]) {
    for &(source, target, fstype, flags) in mounts {
        let _ = std::fs::create_dir_all(target);
        let data = (fstype == "devpts").then_some(c"mode=0620,ptmxmode=0666");
        match rustix::mount::mount(source, target, fstype, flags, data) {
            Ok(()) | Err(rustix::io::Errno::BUSY) => {}
            Err(err) => log(&format!("mounting {target} ({fstype}): {err}")),
        }
    }
}

/// Mounts the root disk `device` (ext4) and makes it `/`, taking the early mounts along.
fn switch_root(device: &str) -> Result<(), String> {
    let step =
        |what: &str, result: rustix::io::Result<()>| result.map_err(|err| format!("{what}: {err}"));
    // The disk appears once its driver has probed it.
    for _ in 0..500 {
        if Path::new(device).exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = std::fs::create_dir_all("/newroot");
    step(
        &format!("mounting {device}"),
        rustix::mount::mount(device, "/newroot", "ext4", MountFlags::empty(), None),
    )?;
    for (_, target, _, _) in EARLY {
        let inside = format!("/newroot{target}");
        let _ = std::fs::create_dir_all(&inside);
        step(
            &format!("moving {target}"),
            rustix::mount::mount_move(target, inside.as_str()),
        )?;
    }
    step("entering the root disk", rustix::process::chdir("/newroot"))?;
    step("moving the root", rustix::mount::mount_move(".", "/"))?;
    step("changing root", rustix::process::chroot("."))?;
    step("entering /", rustix::process::chdir("/"))
}

/// Loads the modules listed in `dir/order`, in order; one already loaded or built in is fine.
fn load_modules(dir: &Path) {
    let Ok(order) = std::fs::read_to_string(dir.join("order")) else {
        return;
    };
    let empty = CString::default();
    for name in order.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let path = dir.join(name);
        let file = match rustix::fs::open(&path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()) {
            Ok(file) => file,
            Err(err) => {
                log(&format!("opening module {}: {err}", path.display()));
                continue;
            }
        };
        match rustix::system::finit_module(&file, &empty, 0) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(err) => log(&format!("loading module {name}: {err}")),
        }
    }
}

/// The kernel command line's `key=value` for `key`.
fn cmdline(key: &str) -> Option<String> {
    let line = std::fs::read_to_string("/proc/cmdline").ok()?;
    line.split_whitespace()
        .find_map(|item| item.strip_prefix(key)?.strip_prefix('=').map(str::to_owned))
}

/// Sets the clock from `svc.clock=<unix seconds>` when the host passed it (a guest without a
/// real-time clock starts in 1970, and TLS, make and package managers care).
fn set_clock() {
    let Some(seconds) = cmdline("svc.clock").and_then(|v| v.parse::<i64>().ok()) else {
        return;
    };
    let now = rustix::time::Timespec {
        tv_sec: seconds,
        tv_nsec: 0,
    };
    if let Err(err) = rustix::time::clock_settime(rustix::time::ClockId::Realtime, now) {
        log(&format!("setting the clock: {err}"));
    }
}

/// Brings the loopback interface up, which a booting kernel leaves down: programs expect
/// `127.0.0.1`, and previews reach a guest's servers through it. One `RTM_NEWLINK` request over
/// rtnetlink, checked by its acknowledgement.
fn loopback_up() -> Result<(), String> {
    use rustix::net::{netlink, AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};
    const RTM_NEWLINK: u16 = 16;
    const NLM_F_REQUEST_ACK: u16 = 0x1 | 0x4;
    const NLMSG_ERROR: u16 = 2;
    const LOOPBACK_IFINDEX: i32 = 1; // the kernel registers loopback first, always as 1
    const IFF_UP: u32 = 1;
    let fail = |what: &str, err: rustix::io::Errno| format!("{what}: {err}");
    let socket = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        None, // NETLINK_ROUTE
    )
    .map_err(|e| fail("opening rtnetlink", e))?;
    // struct nlmsghdr, then struct ifinfomsg: 16 bytes each, in the host's byte order.
    let mut request = Vec::with_capacity(32);
    request.extend_from_slice(&32u32.to_ne_bytes());
    request.extend_from_slice(&RTM_NEWLINK.to_ne_bytes());
    request.extend_from_slice(&NLM_F_REQUEST_ACK.to_ne_bytes());
    request.extend_from_slice(&1u32.to_ne_bytes()); // sequence number
    request.extend_from_slice(&0u32.to_ne_bytes()); // port ID: the kernel's
    request.extend_from_slice(&[0, 0, 0, 0]); // AF_UNSPEC, padding, device type
    request.extend_from_slice(&LOOPBACK_IFINDEX.to_ne_bytes());
    request.extend_from_slice(&IFF_UP.to_ne_bytes()); // flags
    request.extend_from_slice(&IFF_UP.to_ne_bytes()); // which flags change
    let kernel = netlink::SocketAddrNetlink::new(0, 0);
    rustix::net::sendto(&socket, &request, SendFlags::empty(), &kernel)
        .map_err(|e| fail("sending RTM_NEWLINK", e))?;
    let mut reply = [0u8; 64];
    let (received, _) = rustix::net::recv(&socket, &mut reply, RecvFlags::empty())
        .map_err(|e| fail("reading the acknowledgement", e))?;
    let kind = u16::from_ne_bytes([reply[4], reply[5]]);
    let code = i32::from_ne_bytes([reply[16], reply[17], reply[18], reply[19]]);
    match (received >= 20, kind, code) {
        (true, NLMSG_ERROR, 0) => Ok(()),
        (true, NLMSG_ERROR, code) => Err(fail(
            "RTM_NEWLINK",
            rustix::io::Errno::from_raw_os_error(-code),
        )),
        _ => Err(format!(
            "unexpected rtnetlink answer of {received} bytes, type {kind}"
        )),
    }
}

/// Runs as PID 1 until the guest powers off.
pub(crate) fn run(port: u32) -> ! {
    mount_all(&EARLY);
    load_modules(Path::new(MODULES_DIR));
    if let Some(device) = cmdline("svc.root") {
        if let Err(err) = switch_root(&device) {
            // Serving from the initramfs would pass for a sandbox of the image; ending the VM
            // fails its boot at once, with this line in the console the host quotes.
            log(&format!(
                "switching to the root disk {device} failed: {err}; stopping the VM"
            ));
            let _ = rustix::system::reboot(rustix::system::RebootCommand::Restart);
        }
    }
    mount_all(&LATE);
    // Programs open /dev/ptmx; devpts provides it under /dev/pts.
    if !Path::new("/dev/ptmx").exists() {
        let _ = std::os::unix::fs::symlink("pts/ptmx", "/dev/ptmx");
    }
    set_clock();
    if let Err(err) = loopback_up() {
        log(&format!("bringing up the loopback interface: {err}"));
    }
    if let Some(name) = cmdline("svc.hostname") {
        let _ = rustix::system::sethostname(name.as_bytes());
    }
    let mut server = start_server(port);
    loop {
        match rustix::process::wait(rustix::process::WaitOptions::empty()) {
            Ok(Some((pid, _))) if Some(pid.as_raw_nonzero().get()) == server => {
                log("the server stopped; starting it again");
                std::thread::sleep(Duration::from_millis(100));
                server = start_server(port);
            }
            Ok(_) => {}
            // No children at all (the server could not start): wait before trying again.
            Err(_) => {
                std::thread::sleep(Duration::from_secs(1));
                if server.is_none() {
                    server = start_server(port);
                }
            }
        }
    }
}

/// Starts this binary as the vsock server; its PID.
fn start_server(port: u32) -> Option<i32> {
    match std::process::Command::new("/proc/self/exe")
        .arg("--vsock")
        .arg(port.to_string())
        .spawn()
    {
        Ok(child) => i32::try_from(child.id()).ok(),
        Err(err) => {
            log(&format!("starting the server: {err}"));
            None
        }
    }
}
