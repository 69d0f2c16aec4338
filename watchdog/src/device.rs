//! The node's hardware watchdog, behind one trait ([`Watchdog`]), and the Linux
//! device (`/dev/watchdog`, [`LinuxWatchdog`]) that implements it.
//!
//! Opening the device starts its timer. The companion then sets the timeout it wants
//! (`WDIOC_SETTIMEOUT`), reads back what the driver granted (`WDIOC_GETTIMEOUT`: a
//! driver may round it, and only the value read back counts, as SBD and wdmd do) and
//! the driver's identity (`WDIOC_GETSUPPORT`). A feed is one NUL byte written (never a
//! `'V'`, which would let a close stop the timer). A deliberate stop disables the card
//! (`WDIOC_SETOPTIONS` with `WDIOS_DISABLECARD`), writes the magic `'V'` and closes;
//! under `nowayout` neither stops it, and [`Watchdog::disarm`] says so: the machine
//! is reset unless something feeds it within the timeout. A crash closes without the
//! `'V'`: the kernel keeps the timer running and the machine is reset, as it must be.
//!
//! `softdog` (identity "Software Watchdog") is a kernel timer: a hung kernel never
//! fires it, so it is refused unless explicitly allowed ([`check`]).
//!
//! A driver without `WDIOF_MAGICCLOSE` stops its timer on *any* close, also the one
//! the kernel does for a companion that was OOM-killed, SIGKILLed or panicked: its
//! silence then means nothing, and the leader would release a running machine on a
//! watchdog that no longer counts. Such a driver is refused ([`check`]) unless the
//! kernel's `nowayout` is known to be set for it (`/sys/class/watchdog/watchdogN/nowayout`,
//! or the driver's `nowayout` module parameter: [`nowayout_in`]), in which case no close
//! stops it.
//!
//! The ioctl numbers are computed as `<asm-generic/ioctl.h>` does and unit-tested
//! against the values of `<linux/watchdog.h>` on x86_64 and arm64. The `unsafe`
//! blocks of nodefence are here: the `ioctl(2)` call, and the feeding thread's
//! real-time scheduling ([`feed_at_realtime_priority`]), which `libc` alone offers.

use std::fmt;
use std::io;
use std::time::Duration;

/// `struct watchdog_info`: 4 + 4 + 32 bytes.
pub const WATCHDOG_INFO_SIZE: usize = 40;

/// `<asm-generic/ioctl.h>`: `dir << 30 | size << 16 | type << 8 | nr`.
const fn ioc(dir: u32, ty: u8, nr: u8, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | ((ty as u32) << 8) | nr as u32
}
const IOC_READ: u32 = 2;
const IOC_READ_WRITE: u32 = 3;
const W: u8 = b'W';
const INT: usize = 4;

/// The watchdog ioctls nodefence uses (`<linux/watchdog.h>`).
pub mod request {
    use super::*;
    pub const GETSUPPORT: u32 = ioc(IOC_READ, W, 0, WATCHDOG_INFO_SIZE);
    pub const GETSTATUS: u32 = ioc(IOC_READ, W, 1, INT);
    pub const GETBOOTSTATUS: u32 = ioc(IOC_READ, W, 2, INT);
    /// Declared `_IOR` in the kernel header, though it passes a value in.
    pub const SETOPTIONS: u32 = ioc(IOC_READ, W, 4, INT);
    pub const KEEPALIVE: u32 = ioc(IOC_READ, W, 5, INT);
    pub const SETTIMEOUT: u32 = ioc(IOC_READ_WRITE, W, 6, INT);
    pub const GETTIMEOUT: u32 = ioc(IOC_READ, W, 7, INT);
}

/// `WDIOS_DISABLECARD`.
pub const DISABLE_CARD: i32 = 1;
/// `WDIOF_SETTIMEOUT`: the timeout can be set.
pub const OPTION_SET_TIMEOUT: u32 = 0x0080;
/// `WDIOF_MAGICCLOSE`: a `'V'` before close stops it.
pub const OPTION_MAGIC_CLOSE: u32 = 0x0100;
/// softdog's identity.
pub const SOFTDOG_IDENTITY: &str = "Software Watchdog";

/// What a driver says of itself (`struct watchdog_info`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeviceInfo {
    /// The driver's identity ("iTCO_wdt", "IPMI", "Software Watchdog", ...).
    pub identity: String,
    /// `WDIOF_*` flags.
    pub options: u32,
    pub firmware_version: u32,
}

impl DeviceInfo {
    /// From the bytes `WDIOC_GETSUPPORT` filled in (native byte order).
    pub fn from_bytes(raw: &[u8; WATCHDOG_INFO_SIZE]) -> Self {
        let word = |at: usize| u32::from_ne_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
        let identity = &raw[8..];
        let end = identity
            .iter()
            .position(|b| *b == 0)
            .unwrap_or(identity.len());
        Self {
            options: word(0),
            firmware_version: word(4),
            identity: String::from_utf8_lossy(&identity[..end]).trim().to_string(),
        }
    }

    pub fn is_softdog(&self) -> bool {
        self.identity == SOFTDOG_IDENTITY
    }
}

/// Why a device is not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// softdog, not allowed.
    Softdog,
    /// No `WDIOF_MAGICCLOSE`, and `nowayout` not known to be set: any close (a crash
    /// of the companion) stops the timer. `nowayout`: what the kernel says of it
    /// (`None`: it could not be read).
    NoMagicClose {
        identity: String,
        nowayout: Option<bool>,
    },
    /// The driver cannot set a timeout.
    NoSetTimeout(String),
    /// The driver granted none, or one beyond the longest accepted.
    Timeout {
        wanted: Duration,
        granted: Duration,
        max: Duration,
    },
}

/// Whether a device may be used: its identity, whether a close can stop it
/// (`nowayout`: the kernel's flag for it, `None` when unknown), and the timeout it
/// granted for the one wanted (a driver may round; beyond `max` the wait would be
/// too long to be useful).
pub fn check(
    info: &DeviceInfo,
    nowayout: Option<bool>,
    wanted: Duration,
    granted: Duration,
    max: Duration,
    allow_softdog: bool,
) -> Result<(), Refusal> {
    if info.is_softdog() && !allow_softdog {
        return Err(Refusal::Softdog);
    }
    if info.options & OPTION_MAGIC_CLOSE == 0 && nowayout != Some(true) {
        return Err(Refusal::NoMagicClose {
            identity: info.identity.clone(),
            nowayout,
        });
    }
    if info.options & OPTION_SET_TIMEOUT == 0 {
        return Err(Refusal::NoSetTimeout(info.identity.clone()));
    }
    if granted.is_zero() || granted > max {
        return Err(Refusal::Timeout {
            wanted,
            granted,
            max,
        });
    }
    Ok(())
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Softdog => write!(
                f,
                "the device is softdog (\"{SOFTDOG_IDENTITY}\"), a kernel timer that a hung \
                 kernel never fires: load the machine's hardware watchdog driver (iTCO_wdt, \
                 sp5100_tco, ipmi_watchdog, ...), or allow softdog explicitly"
            ),
            Refusal::NoMagicClose { identity, nowayout } => write!(
                f,
                "the driver ({identity}) has no magic close (no WDIOF_MAGICCLOSE): it stops \
                 its timer whenever the device is closed, also when the companion is killed, so \
                 a silent companion would not mean a reset machine; the kernel's nowayout {}: \
                 load the driver with nowayout=1 (or use a kernel built with \
                 CONFIG_WATCHDOG_NOWAYOUT), or another watchdog",
                match nowayout {
                    Some(_) => "is not set for it",
                    None => "cannot be read for it (/sys/class/watchdog)",
                }
            ),
            Refusal::NoSetTimeout(id) => write!(
                f,
                "the driver ({id}) cannot set its timeout (no WDIOF_SETTIMEOUT): nodefence \
                 cannot know when it fires"
            ),
            Refusal::Timeout {
                wanted,
                granted,
                max,
            } => write!(
                f,
                "the driver granted a timeout of {}s for the {}s asked, outside 1s..{}s",
                granted.as_secs(),
                wanted.as_secs(),
                max.as_secs()
            ),
        }
    }
}

impl std::error::Error for Refusal {}

/// How a deliberate stop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disarmed {
    /// The timer is stopped.
    Stopped,
    /// `nowayout`: it runs on, and resets the machine unless fed within its timeout.
    StillRunning,
}

/// A machine's watchdog, armed: the companion feeds it while its rule allows.
pub trait Watchdog: Send + Sync {
    fn info(&self) -> &DeviceInfo;
    /// Whether the kernel's `nowayout` is set for it (no close stops it); `None`:
    /// unknown.
    fn nowayout(&self) -> Option<bool>;
    /// The timeout the driver granted, read back.
    fn granted(&self) -> Duration;
    /// One feed: the timer starts over.
    fn feed(&mut self) -> io::Result<()>;
    /// A deliberate stop (a rolling update): disable, magic close.
    fn disarm(self: Box<Self>) -> io::Result<Disarmed>;
}

/// `/dev/watchdog`, the misc device (major 10, minor 130): the first watchdog the
/// kernel registered, `watchdog0`.
pub const LEGACY_DEVICE: (u32, u32) = (10, 130);

/// Where the kernel describes its watchdogs.
pub const SYSFS_CLASS: &str = "/sys/class/watchdog";

/// Whether the kernel's `nowayout` is set for the watchdog whose character device is
/// `major:minor`, as `class` ([`SYSFS_CLASS`]) tells: its `nowayout` attribute, else
/// its driver's `nowayout` module parameter. `None`: neither can be read (an old
/// kernel, sysfs not mounted in the container).
pub fn nowayout_in(class: &std::path::Path, major: u32, minor: u32) -> Option<bool> {
    let dir = if (major, minor) == LEGACY_DEVICE {
        class.join("watchdog0")
    } else {
        let wanted = format!("{major}:{minor}");
        std::fs::read_dir(class)
            .ok()?
            .flatten()
            .map(|entry| entry.path())
            .find(|dir| {
                std::fs::read_to_string(dir.join("dev")).is_ok_and(|dev| dev.trim() == wanted)
            })?
    };
    flag(&dir.join("nowayout"))
        .or_else(|| flag(&dir.join("device/driver/module/parameters/nowayout")))
}

/// A sysfs flag: `1`/`0`, or a module's boolean parameter `Y`/`N`.
fn flag(path: &std::path::Path) -> Option<bool> {
    match std::fs::read_to_string(path).ok()?.trim() {
        "1" | "Y" | "y" => Some(true),
        "0" | "N" | "n" => Some(false),
        _ => None,
    }
}

/// A device number's major and minor, as the kernel's `new_encode_dev` lays them out
/// (glibc's `major()` and `minor()`).
pub fn major_minor(rdev: u64) -> (u32, u32) {
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
    (
        u32::try_from(major).unwrap_or(u32::MAX),
        u32::try_from(minor).unwrap_or(u32::MAX),
    )
}

/// Runs the calling thread under `SCHED_RR` at the highest priority, as SBD runs its
/// whole process, so that a busy machine does not delay a feed past the scheduling
/// allowance: the priority set. Refused without `CAP_SYS_NICE`, and in a cgroup whose
/// real-time budget is zero; the caller says so and feeds at normal priority.
#[cfg(target_os = "linux")]
pub fn feed_at_realtime_priority() -> io::Result<i32> {
    linux::realtime()
}

/// No real-time scheduling here.
#[cfg(not(target_os = "linux"))]
pub fn feed_at_realtime_priority() -> io::Result<i32> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "no real-time scheduling on this system",
    ))
}

/// Seconds as the `int` the ioctls take, within `1..=i32::MAX`.
pub fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

#[cfg(target_os = "linux")]
pub use linux::LinuxWatchdog;

#[cfg(target_os = "linux")]
mod linux {
    use std::fs::{File, OpenOptions};
    use std::io::{self, Write as _};
    use std::os::fd::AsRawFd as _;
    use std::os::unix::fs::MetadataExt as _;
    use std::path::Path;
    use std::time::Duration;

    use super::{DISABLE_CARD, DeviceInfo, Disarmed, WATCHDOG_INFO_SIZE, Watchdog, request};

    /// `/dev/watchdog` (or another path), open and armed.
    pub struct LinuxWatchdog {
        file: File,
        info: DeviceInfo,
        granted: Duration,
        nowayout: Option<bool>,
    }

    impl LinuxWatchdog {
        /// Opens `path` (which starts the timer), sets the timeout to `wanted` and reads
        /// back what the driver granted and its identity. The caller then
        /// [`super::check`]s them and disarms a device it refuses.
        pub fn open(path: &Path, wanted: Duration) -> io::Result<Self> {
            let file = OpenOptions::new().write(true).open(path)?;
            let mut raw = [0u8; WATCHDOG_INFO_SIZE];
            ioctl(&file, request::GETSUPPORT, raw.as_mut_ptr().cast())?;
            let info = DeviceInfo::from_bytes(&raw);
            let mut timeout = super::seconds(wanted);
            // Drivers without WDIOF_SETTIMEOUT refuse it: what they run with is
            // read below, and `check` refuses them.
            let _ = ioctl(&file, request::SETTIMEOUT, (&raw mut timeout).cast());
            let mut granted: i32 = 0;
            ioctl(&file, request::GETTIMEOUT, (&raw mut granted).cast())?;
            let (major, minor) = super::major_minor(file.metadata()?.rdev());
            let nowayout = super::nowayout_in(Path::new(super::SYSFS_CLASS), major, minor);
            Ok(Self {
                file,
                info,
                granted: Duration::from_secs(u64::try_from(granted).unwrap_or(0)),
                nowayout,
            })
        }
    }

    pub(super) fn realtime() -> io::Result<i32> {
        // SAFETY: no pointer is passed.
        #[allow(unsafe_code)]
        let max = unsafe { libc::sched_get_priority_max(libc::SCHED_RR) };
        if max < 0 {
            return Err(io::Error::last_os_error());
        }
        let param = libc::sched_param {
            sched_priority: max,
        };
        // SAFETY: `param` is a valid sched_param for the call's duration; pid 0 is the
        // calling thread.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_RR, &raw const param) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(max)
    }

    fn ioctl(file: &File, request: u32, arg: *mut libc::c_void) -> io::Result<()> {
        // SAFETY: `file` is an open descriptor for the call's duration and `arg`
        // points to memory of the size `request` encodes (a 40-byte watchdog_info
        // or an int), writable, owned by the caller.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), request as _, arg) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    impl Watchdog for LinuxWatchdog {
        fn info(&self) -> &DeviceInfo {
            &self.info
        }

        fn granted(&self) -> Duration {
            self.granted
        }

        fn nowayout(&self) -> Option<bool> {
            self.nowayout
        }

        fn feed(&mut self) -> io::Result<()> {
            self.file.write_all(&[0])
        }

        fn disarm(mut self: Box<Self>) -> io::Result<Disarmed> {
            let mut option = DISABLE_CARD;
            let disabled = ioctl(&self.file, request::SETOPTIONS, (&raw mut option).cast());
            self.file.write_all(b"V")?;
            // Closing now: with the 'V' the kernel stops the timer, unless nowayout.
            let busy = matches!(&disabled, Err(e) if e.raw_os_error() == Some(libc::EBUSY));
            drop(self);
            Ok(if busy {
                Disarmed::StillRunning
            } else {
                Disarmed::Stopped
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ioctl_numbers_are_the_kernel_headers() {
        // <linux/watchdog.h> compiled on x86_64 and arm64 (the same generic layout).
        assert_eq!(request::GETSUPPORT, 0x8028_5700);
        assert_eq!(request::GETSTATUS, 0x8004_5701);
        assert_eq!(request::GETBOOTSTATUS, 0x8004_5702);
        assert_eq!(request::SETOPTIONS, 0x8004_5704);
        assert_eq!(request::KEEPALIVE, 0x8004_5705);
        assert_eq!(request::SETTIMEOUT, 0xC004_5706);
        assert_eq!(request::GETTIMEOUT, 0x8004_5707);
    }

    fn info(identity: &str, options: u32) -> [u8; WATCHDOG_INFO_SIZE] {
        let mut raw = [0u8; WATCHDOG_INFO_SIZE];
        raw[0..4].copy_from_slice(&options.to_ne_bytes());
        raw[4..8].copy_from_slice(&7u32.to_ne_bytes());
        raw[8..8 + identity.len()].copy_from_slice(identity.as_bytes());
        raw
    }

    #[test]
    fn watchdog_info_is_read_from_its_bytes() {
        let i = DeviceInfo::from_bytes(&info("iTCO_wdt", 0x8180));
        assert_eq!(i.identity, "iTCO_wdt");
        assert_eq!(i.options, 0x8180);
        assert_eq!(i.firmware_version, 7);
        assert!(!i.is_softdog());
        // 32 bytes without a NUL: all of them.
        let full = DeviceInfo::from_bytes(&info(&"x".repeat(32), 0));
        assert_eq!(full.identity.len(), 32);
        assert!(DeviceInfo::from_bytes(&info(SOFTDOG_IDENTITY, 0x8180)).is_softdog());
    }

    #[test]
    fn softdog_and_drivers_that_cannot_set_a_timeout_are_refused() {
        let s = |n| Duration::from_secs(n);
        let hw = DeviceInfo::from_bytes(&info("iTCO_wdt", OPTION_SET_TIMEOUT | OPTION_MAGIC_CLOSE));
        assert!(check(&hw, None, s(10), s(10), s(60), false).is_ok());
        assert!(
            check(&hw, None, s(10), s(12), s(60), false).is_ok(),
            "rounded up: the granted counts"
        );
        let e = check(&hw, None, s(10), s(0), s(60), false).unwrap_err();
        assert!(e.to_string().contains("granted a timeout of 0s"), "{e}");
        assert!(check(&hw, None, s(10), s(120), s(60), false).is_err());
        let soft = DeviceInfo::from_bytes(&info(
            SOFTDOG_IDENTITY,
            OPTION_SET_TIMEOUT | OPTION_MAGIC_CLOSE,
        ));
        let e = check(&soft, None, s(10), s(10), s(60), false).unwrap_err();
        assert!(e.to_string().contains("hung kernel never fires"), "{e}");
        assert!(check(&soft, None, s(10), s(10), s(60), true).is_ok());
        let fixed = DeviceInfo::from_bytes(&info("wdat_wdt", OPTION_MAGIC_CLOSE));
        assert!(
            check(&fixed, None, s(10), s(30), s(60), false)
                .unwrap_err()
                .to_string()
                .contains("cannot set its timeout")
        );
    }

    /// Issue 52, item 2: a driver without `WDIOF_MAGICCLOSE` stops its timer on any
    /// close, a crash of the companion's process included; it counts only where the
    /// kernel's `nowayout` is known to be set.
    #[test]
    fn a_driver_without_magic_close_is_refused_unless_nowayout_is_known_set() {
        let s = |n| Duration::from_secs(n);
        let no_magic = DeviceInfo::from_bytes(&info("wdat_wdt", OPTION_SET_TIMEOUT));
        for nowayout in [None, Some(false)] {
            let e = check(&no_magic, nowayout, s(10), s(10), s(60), false).unwrap_err();
            assert!(
                matches!(&e, Refusal::NoMagicClose { identity, .. } if identity == "wdat_wdt"),
                "{e:?}"
            );
            let text = e.to_string();
            assert!(
                text.contains("no WDIOF_MAGICCLOSE") && text.contains("nowayout=1"),
                "{text}"
            );
        }
        assert!(check(&no_magic, Some(true), s(10), s(10), s(60), false).is_ok());
    }

    #[test]
    fn nowayout_is_read_from_sysfs_for_the_device_opened() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let write = |path: &str, text: &str| {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap_or(dir.path()))
                .unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(path, text).unwrap_or_else(|e| panic!("{e}"));
        };
        write("watchdog0/nowayout", "1\n");
        write("watchdog0/dev", "250:0\n");
        write("watchdog1/dev", "250:1\n");
        write("watchdog1/device/driver/module/parameters/nowayout", "N\n");
        write("watchdog2/dev", "250:2\n");
        let class = dir.path();
        assert_eq!(nowayout_in(class, 10, 130), Some(true), "/dev/watchdog");
        assert_eq!(nowayout_in(class, 250, 0), Some(true));
        assert_eq!(
            nowayout_in(class, 250, 1),
            Some(false),
            "the module's parameter"
        );
        assert_eq!(nowayout_in(class, 250, 2), None, "nothing says");
        assert_eq!(nowayout_in(class, 250, 9), None, "no such device");
        assert_eq!(nowayout_in(&class.join("absent"), 10, 130), None);
        // glibc's makedev(10, 130) and makedev(250, 1).
        assert_eq!(major_minor(0x0a82), (10, 130));
        assert_eq!(major_minor(0xfa01), (250, 1));
        assert_eq!(major_minor(0x1111_2c70), (300, 70_000));
    }

    #[test]
    fn seconds_are_bounded() {
        assert_eq!(seconds(Duration::from_millis(10)), 1);
        assert_eq!(seconds(Duration::from_secs(10)), 10);
        assert_eq!(seconds(Duration::from_secs(u64::MAX)), i32::MAX);
    }
}

/// A watchdog in memory, for tests: counts its feeds, keeps the last, and can be
/// told to refuse to stop (`nowayout`). Clones share their state.
#[derive(Debug, Clone)]
pub struct RecordingWatchdog {
    info: DeviceInfo,
    granted: Duration,
    state: std::sync::Arc<std::sync::Mutex<Recorded>>,
    nowayout: bool,
}

/// What a [`RecordingWatchdog`] saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recorded {
    pub feeds: u64,
    pub last_feed: Option<std::time::Instant>,
    /// The longest time between two feeds (a reset, had it been W or more).
    pub longest_gap: Duration,
    pub disarmed: bool,
}

impl RecordingWatchdog {
    /// A driver with `WDIOF_SETTIMEOUT` and `WDIOF_MAGICCLOSE`; `nowayout`: the
    /// kernel's flag (known).
    pub fn new(identity: &str, granted: Duration, nowayout: bool) -> Self {
        Self {
            info: DeviceInfo {
                identity: identity.to_string(),
                options: OPTION_SET_TIMEOUT | OPTION_MAGIC_CLOSE,
                firmware_version: 0,
            },
            granted,
            state: Default::default(),
            nowayout,
        }
    }

    /// The same stand-in, its driver saying these `WDIOF_*` options instead.
    pub fn with_options(mut self, options: u32) -> Self {
        self.info.options = options;
        self
    }

    /// What it saw so far.
    pub fn recorded(&self) -> Recorded {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Watchdog for RecordingWatchdog {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn granted(&self) -> Duration {
        self.granted
    }

    fn nowayout(&self) -> Option<bool> {
        Some(self.nowayout)
    }

    fn feed(&mut self) -> io::Result<()> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = std::time::Instant::now();
        if let Some(last) = s.last_feed {
            s.longest_gap = s.longest_gap.max(now.duration_since(last));
        }
        s.feeds += 1;
        s.last_feed = Some(now);
        Ok(())
    }

    fn disarm(self: Box<Self>) -> io::Result<Disarmed> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .disarmed = true;
        Ok(if self.nowayout {
            Disarmed::StillRunning
        } else {
            Disarmed::Stopped
        })
    }
}
