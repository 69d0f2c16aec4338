//! Trusting a BMC's own certificate, as an operator does it with the real binary:
//! `tls-fingerprint` shows what the BMC presents (checked against openssl, an
//! independent peer), its line or its saved certificate goes into the inventory, and
//! `status` and `fence` then work — against a mock BMC presenting a self-signed
//! `CA:TRUE` certificate, with no `insecure` anywhere. Another certificate is refused,
//! once, with the reason and no stray log lines.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::cli_common;

use std::path::{Path, PathBuf};

use cli_common::{nodefence, text, unproven_fence, write_agent_config, write_secret};
use nodefence_mocks::redfish::{MockPower, MockRedfish, MockRedfishHandle, SystemSpec};
use nodefence_mocks::tls::CertKind;

const PASSWORD: &str = "tls-Secret-7";

async fn bmc(kind: CertKind) -> MockRedfishHandle {
    MockRedfish::builder()
        .system(SystemSpec::new("1").power(MockPower::On))
        .credentials("fence", PASSWORD)
        .certificate(kind)
        .start()
        .await
        .unwrap()
}

/// nodefence.toml and an inventory with worker-1 behind `endpoint`, trusted by `trust`
/// (one TOML line). Returns the config path.
fn write_config(dir: &Path, endpoint: &str, trust: &str) -> PathBuf {
    write_secret(&dir.join("bmc-password"), PASSWORD);
    let config = write_agent_config(dir, 2, "50ms", "5s");
    std::fs::write(
        dir.join("inventory.toml"),
        format!(
            "[nodes.worker-1]\ndriver = \"redfish\"\nendpoint = \"{endpoint}\"\nusername = \"fence\"\n\
             password_file = \"bmc-password\"\nrequest_timeout = \"2s\"\noperation_timeout = \"4s\"\n{trust}\n"
        ),
    )
    .unwrap();
    config
}

/// The text with every run of spaces made one (the output is column-aligned).
fn squash(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if !(c == ' ' && out.ends_with(' ')) {
            out.push(c);
        }
    }
    out
}

/// `openssl x509 -noout -fingerprint -sha256` of a PEM file, or `None` when openssl
/// is not installed (the cross-check is reported skipped; a failure under
/// `NODEFENCE_REQUIRE_PEERS=1`).
fn openssl_fingerprint(pem: &Path) -> Option<String> {
    let openssl = nodefence_mocks::peers::openssl()?;
    let out = std::process::Command::new(openssl)
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(pem)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl x509 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_fingerprint_then_status_and_fence_with_a_pin_or_the_saved_certificate() {
    let m = bmc(CertKind::SelfSigned).await;
    let dir = tempfile::tempdir().unwrap();
    // Nothing trusted yet: the system trust store refuses it.
    let config = write_config(dir.path(), &m.base_url(), "");
    let status = nodefence(&config, &["status"]).await;
    assert_eq!(status.status.code(), Some(1), "{}", text(&status));
    assert!(text(&status).contains("self-signed"), "{}", text(&status));

    // The helper: what it presents, why it is refused now, the line to paste.
    let saved = dir.path().join("bmc.pem");
    let shown = nodefence(
        &config,
        &[
            "tls-fingerprint",
            "worker-1",
            "--save",
            saved.to_str().unwrap(),
        ],
    )
    .await;
    let out = squash(&text(&shown));
    assert_eq!(shown.status.code(), Some(0), "{out}");
    assert!(out.contains("CA: yes (basicConstraints CA:TRUE)"), "{out}");
    assert!(out.contains("(self-signed)"), "{out}");
    assert!(out.contains("verdict: refused"), "{out}");
    let line = out
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("tls_fingerprint = \"sha256:"))
        .unwrap_or_else(|| panic!("no inventory line in\n{out}"))
        .to_string();
    assert_eq!(
        std::fs::read_to_string(&saved).unwrap(),
        m.certificate_pem().unwrap()
    );
    if let Some(openssl) = openssl_fingerprint(&saved) {
        // "sha256 Fingerprint=AB:..." and "tls_fingerprint = \"sha256:AB:...\"".
        let hex = openssl.split_once('=').unwrap().1;
        assert!(
            line.contains(hex),
            "openssl says {openssl}, nodefence {line}"
        );
    }

    // Pinned: status and fence work.
    let config = write_config(dir.path(), &m.base_url(), &line);
    let status = nodefence(&config, &["status"]).await;
    assert_eq!(status.status.code(), Some(0), "{}", text(&status));
    assert!(String::from_utf8_lossy(&status.stdout).contains("On"));
    let fence = nodefence(&config, &unproven_fence("worker-1", "off", &[])).await;
    assert_eq!(fence.status.code(), Some(0), "{}", text(&fence));
    assert_eq!(m.power("1"), Some(MockPower::Off));

    // ca_file = the saved certificate: the same.
    m.set_power("1", MockPower::On);
    let config = write_config(dir.path(), &m.base_url(), "ca_file = \"bmc.pem\"");
    let shown = nodefence(&config, &["tls-fingerprint", "worker-1"]).await;
    assert!(
        squash(&text(&shown)).contains("verdict: accepted"),
        "{}",
        text(&shown)
    );
    let fence = nodefence(&config, &unproven_fence("worker-1", "off", &[])).await;
    assert_eq!(fence.status.code(), Some(0), "{}", text(&fence));
    assert_eq!(m.power("1"), Some(MockPower::Off));
    let inventory = std::fs::read_to_string(dir.path().join("inventory.toml")).unwrap();
    assert!(!inventory.contains("insecure"));
}

fn impostor_fingerprint(m: &MockRedfishHandle) -> nodefence::tls::CertFingerprint {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let pem = m.certificate_pem().unwrap();
    nodefence::tls::CertFingerprint::of(
        CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .as_ref(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_certificate_is_refused_once_with_the_reason_and_no_stray_log_line() {
    let real = bmc(CertKind::SelfSigned).await;
    let impostor = bmc(CertKind::SelfSigned).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("real.pem"), real.certificate_pem().unwrap()).unwrap();
    for trust in ["ca_file = \"real.pem\"".to_string(), {
        let shown = nodefence(
            &write_config(dir.path(), &real.base_url(), ""),
            &["tls-fingerprint", &real.base_url()],
        )
        .await;
        text(&shown)
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("tls_fingerprint"))
            .unwrap()
            .to_string()
    }] {
        let config = write_config(dir.path(), &impostor.base_url(), &trust);
        let status = nodefence(&config, &["status", "--log-level", "info"]).await;
        let out = text(&status);
        assert_eq!(status.status.code(), Some(1), "{trust}: {out}");
        assert!(out.contains("tls"), "{out}");
        assert!(
            out.contains(&format!("{}", impostor_fingerprint(&impostor))),
            "the presented fingerprint is shown: {out}"
        );
        assert!(
            !out.contains("rustls"),
            "no stray TLS library log lines: {out}"
        );
        assert!(
            !out.contains("retrying"),
            "a certificate failure is not retried: {out}"
        );
        let fence = nodefence(&config, &unproven_fence("worker-1", "off", &[])).await;
        assert_eq!(fence.status.code(), Some(1), "{}", text(&fence));
        assert!(impostor.request_log().is_empty(), "nothing was sent to it");
        assert_eq!(impostor.power("1"), Some(MockPower::On));
    }
}
