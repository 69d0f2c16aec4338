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
//! The ioctl numbers are computed as `<asm-generic/ioctl.h>` does and unit-tested
//! against the values of `<linux/watchdog.h>` on x86_64 and arm64. The one `unsafe`
//! block of nodefence is the `ioctl(2)` call here.

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
    /// The driver cannot set a timeout.
    NoSetTimeout(String),
    /// The driver granted none, or one beyond the longest accepted.
    Timeout {
        wanted: Duration,
        granted: Duration,
        max: Duration,
    },
}

/// Whether a device may be used: its identity, and the timeout it granted for the one
/// wanted (a driver may round; beyond `max` the wait would be too long to be useful).
pub fn check(
    info: &DeviceInfo,
    wanted: Duration,
    granted: Duration,
    max: Duration,
    allow_softdog: bool,
) -> Result<(), Refusal> {
    if info.is_softdog() && !allow_softdog {
        return Err(Refusal::Softdog);
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
    /// The timeout the driver granted, read back.
    fn granted(&self) -> Duration;
    /// One feed: the timer starts over.
    fn feed(&mut self) -> io::Result<()>;
    /// A deliberate stop (a rolling update): disable, magic close.
    fn disarm(self: Box<Self>) -> io::Result<Disarmed>;
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
    use std::path::Path;
    use std::time::Duration;

    use super::{DISABLE_CARD, DeviceInfo, Disarmed, WATCHDOG_INFO_SIZE, Watchdog, request};

    /// `/dev/watchdog` (or another path), open and armed.
    pub struct LinuxWatchdog {
        file: File,
        info: DeviceInfo,
        granted: Duration,
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
            Ok(Self {
                file,
                info,
                granted: Duration::from_secs(u64::try_from(granted).unwrap_or(0)),
            })
        }
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
        assert!(check(&hw, s(10), s(10), s(60), false).is_ok());
        assert!(
            check(&hw, s(10), s(12), s(60), false).is_ok(),
            "rounded up: the granted counts"
        );
        let e = check(&hw, s(10), s(0), s(60), false).unwrap_err();
        assert!(e.to_string().contains("granted a timeout of 0s"), "{e}");
        assert!(check(&hw, s(10), s(120), s(60), false).is_err());
        let soft = DeviceInfo::from_bytes(&info(SOFTDOG_IDENTITY, OPTION_SET_TIMEOUT));
        let e = check(&soft, s(10), s(10), s(60), false).unwrap_err();
        assert!(e.to_string().contains("hung kernel never fires"), "{e}");
        assert!(check(&soft, s(10), s(10), s(60), true).is_ok());
        let fixed = DeviceInfo::from_bytes(&info("wdat_wdt", OPTION_MAGIC_CLOSE));
        assert!(
            check(&fixed, s(10), s(30), s(60), false)
                .unwrap_err()
                .to_string()
                .contains("cannot set its timeout")
        );
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
