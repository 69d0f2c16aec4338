//! Running a fence agent once: options on standard input, a clean environment, output
//! read up to a cap, a deadline, and nothing left running afterwards.
//!
//! The agent runs in a process group of its own. When it misses its deadline (or the
//! caller gives up on it), the whole group is sent SIGKILL with the system's `kill`
//! program (`kill -s KILL -- -<pgid>`: no `unsafe`, no libc), so helpers it started
//! (fence_ipmilan's ipmitool, an ssh) die with it; the agent itself is also killed
//! directly and reaped. The group is signalled while its leader is not yet reaped, so
//! its id cannot have been reused.

use std::io;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::time::{Instant, timeout, timeout_at};

/// At most this much of each of stdout and stderr is kept; the rest is read and
/// dropped, so an agent never blocks on a full pipe.
pub const OUTPUT_CAP: usize = 64 * 1024;
/// The only environment an agent gets, besides `LANG=C`.
pub const AGENT_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";
/// Where the `kill` program is looked for.
const KILL_PROGRAMS: [&str; 2] = ["/bin/kill", "/usr/bin/kill"];
/// How long reaping a killed agent may take.
const REAP_TIMEOUT: Duration = Duration::from_secs(5);

/// One output stream, up to [`OUTPUT_CAP`].
#[derive(Debug, Default)]
pub(crate) struct Captured {
    pub bytes: Vec<u8>,
    /// More was printed than kept, or reading failed: the text is not all there is.
    pub incomplete: bool,
}

/// A run that ended by itself.
#[derive(Debug)]
pub(crate) struct Finished {
    pub status: ExitStatus,
    pub stdout: Captured,
    pub stderr: Captured,
    /// The options could not be written (the agent closed its input early).
    pub stdin_error: Option<io::Error>,
    pub elapsed: Duration,
}

/// A run that did not end by itself.
#[derive(Debug)]
pub(crate) enum RunError {
    /// The agent could not be started.
    Spawn(io::Error),
    /// The deadline passed; the agent and its process group were killed.
    TimedOut(Duration),
    /// Waiting for the agent failed.
    Wait(io::Error),
}

/// Runs `agent` with no arguments and `input` on its standard input, until `deadline`.
pub(crate) async fn run(
    agent: &Path,
    input: &[u8],
    deadline: Instant,
) -> Result<Finished, RunError> {
    let started = Instant::now();
    let mut cmd = Command::new(agent);
    cmd.env_clear()
        .env("PATH", AGENT_PATH)
        .env("LANG", "C")
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    let child = spawn(&mut cmd).await.map_err(RunError::Spawn)?;
    let mut group = Group::new(child);
    let stdin = group.child.stdin.take();
    let stdout = group.child.stdout.take();
    let stderr = group.child.stderr.take();
    let child = &mut group.child;
    let work = async move {
        let write = async move {
            let Some(mut pipe) = stdin else {
                return Some(io::Error::other("the agent has no standard input pipe"));
            };
            let result = match pipe.write_all(input).await {
                Ok(()) => pipe.shutdown().await,
                Err(e) => Err(e),
            };
            drop(pipe);
            result.err()
        };
        let (stdin_error, stdout, stderr, status) =
            tokio::join!(write, capture(stdout), capture(stderr), child.wait());
        status.map(|status| (status, stdout, stderr, stdin_error))
    };
    let outcome = timeout_at(deadline, work).await;
    match outcome {
        Ok(Ok((status, stdout, stderr, stdin_error))) => {
            group.finished = true;
            Ok(Finished {
                status,
                stdout,
                stderr,
                stdin_error,
                elapsed: started.elapsed(),
            })
        }
        Ok(Err(e)) => {
            group.kill().await;
            Err(RunError::Wait(e))
        }
        Err(_) => {
            group.kill().await;
            Err(RunError::TimedOut(started.elapsed()))
        }
    }
}

/// Starts the agent, retrying briefly on ETXTBSY: the file is being replaced, or
/// (in tests) another thread forked while the script was still open for writing.
async fn spawn(cmd: &mut Command) -> io::Result<Child> {
    const ETXTBSY: i32 = 26;
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(ETXTBSY) && tries < 10 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

/// Reads `reader` to its end, keeping the first [`OUTPUT_CAP`] bytes.
async fn capture<R: AsyncRead + Unpin>(reader: Option<R>) -> Captured {
    let mut out = Captured::default();
    let Some(mut reader) = reader else {
        out.incomplete = true;
        return out;
    };
    let mut buf = vec![0u8; 8192];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                let room = OUTPUT_CAP - out.bytes.len();
                if n > room {
                    out.incomplete = true;
                }
                out.bytes.extend_from_slice(&buf[..n.min(room)]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                out.incomplete = true;
                break;
            }
        }
    }
    out
}

/// The agent's process, and its process group until the run ended normally.
struct Group {
    child: Child,
    /// The group's id (the agent's pid, as it leads its own group).
    pgid: Option<u32>,
    /// The agent exited and its output ended: nothing to clean up.
    finished: bool,
}

impl Group {
    fn new(child: Child) -> Self {
        let pgid = child.id();
        Self {
            child,
            pgid,
            finished: false,
        }
    }

    /// Kills the group and the agent, and reaps the agent.
    async fn kill(&mut self) {
        if let Some(mut killer) = self.pgid.and_then(group_killer)
            && let Ok(mut running) = killer.spawn()
        {
            let _ = timeout(REAP_TIMEOUT, running.wait()).await;
        }
        let _ = self.child.start_kill();
        if timeout(REAP_TIMEOUT, self.child.wait()).await.is_err() {
            tracing::warn!(pid = ?self.pgid, "a killed fence agent was not reaped in time");
        }
        self.finished = true;
    }
}

impl Drop for Group {
    /// The caller gave up on the run (its future was dropped): kill the group now;
    /// `kill_on_drop` then kills the agent itself and tokio reaps it.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let Some(pgid) = self.pgid else { return };
        if let Some(program) = KILL_PROGRAMS.iter().find(|p| Path::new(p).is_file()) {
            // A short, blocking run of `kill`: only on this abnormal path.
            let _ = std::process::Command::new(program)
                .args(["-s", "KILL", "--", &format!("-{pgid}")])
                .env_clear()
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// `kill -s KILL -- -<pgid>`, if a `kill` program exists.
fn group_killer(pgid: u32) -> Option<Command> {
    let program = KILL_PROGRAMS.iter().find(|p| Path::new(p).is_file())?;
    let mut cmd = Command::new(program);
    cmd.args(["-s", "KILL", "--", &format!("-{pgid}")])
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    Some(cmd)
}
