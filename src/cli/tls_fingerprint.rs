//! `nodefence tls-fingerprint NODE|URL`: which certificate a BMC presents, and the
//! inventory line that trusts exactly it — `ssh-keyscan` for BMCs.
//!
//! One TLS handshake per HTTPS endpoint, nothing sent after it (no request, no
//! credentials: see [`crate::tls::probe`]). For each it prints the certificate
//! (subject, issuer, names, validity, CA flag, SHA-256), whether the node's current
//! trust setting accepts it and why not, and the `tls_fingerprint` line to paste.
//! `--save FILE` writes the certificate as PEM, for `ca_file`. The operator confirms
//! the fingerprint out of band (the BMC's web page or console) before pasting it:
//! this connection proves nothing about who answered.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use url::Url;

use super::{OutputFormat, exit};
use crate::config::{PowerSource, TlsSettings};
use crate::tls::inspect::{CertSummary, Validity, date};
use crate::tls::probe;

#[derive(Debug, clap::Args)]
pub struct TlsFingerprintArgs {
    /// An inventory node (its BMC endpoints are read from the configuration), or an
    /// https:// URL.
    pub target: String,
    /// Write the certificate the server presents (PEM) to this file, for `ca_file`.
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,
    /// How long to wait for the connection and the handshake.
    #[arg(long, default_value = "5s", value_parser = super::duration_arg)]
    pub timeout: Duration,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

/// One endpoint's answer.
#[derive(Debug, Serialize)]
struct Report {
    /// The node and which of its power methods, when a node was named.
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<String>,
    endpoint: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    protocol: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    certificate: Option<CertSummary>,
    /// Certificates of the chain after the server's own.
    chain_length: usize,
    /// The node's current trust setting, and its verdict on this certificate.
    #[serde(skip_serializing_if = "Option::is_none")]
    current_setting: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    verdict: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inventory_line: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip)]
    pem: Option<String>,
}

/// An HTTPS endpoint to ask, with the trust setting it is configured with.
struct Endpoint {
    label: Option<String>,
    url: Url,
    tls: Option<TlsSettings>,
}

pub async fn run(config_path: &std::path::Path, args: &TlsFingerprintArgs) -> u8 {
    let endpoints = match endpoints(config_path, &args.target) {
        Ok(list) => list,
        Err(code) => return code,
    };
    if args.save.is_some() && endpoints.len() != 1 {
        eprintln!(
            "error: --save needs exactly one HTTPS endpoint, and {} has {}; name one by URL",
            args.target,
            endpoints.len()
        );
        return exit::USAGE;
    }
    let mut reports = Vec::with_capacity(endpoints.len());
    for endpoint in &endpoints {
        reports.push(report(endpoint, args.timeout).await);
    }
    if let (Some(path), Some(pem)) = (&args.save, reports.first().and_then(|r| r.pem.clone())) {
        if let Err(e) = std::fs::write(path, pem) {
            eprintln!("error: cannot write {}: {e}", path.display());
            return exit::FAILED;
        }
        eprintln!(
            "wrote the certificate to {}; check its fingerprint against the BMC before trusting it",
            path.display()
        );
    }
    match args.output {
        OutputFormat::Json => match serde_json::to_string_pretty(&reports) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("error: cannot encode JSON: {e}");
                return exit::FAILED;
            }
        },
        OutputFormat::Table => print!("{}", render(&reports)),
    }
    if reports.iter().any(|r| r.error.is_some()) {
        exit::FAILED
    } else {
        exit::OK
    }
}

/// The HTTPS endpoints of a node (every power method that has one), or the URL given.
fn endpoints(config_path: &std::path::Path, target: &str) -> Result<Vec<Endpoint>, u8> {
    if target.contains("://") {
        let url = Url::parse(target).map_err(|e| {
            eprintln!("error: {target:?} is not a URL: {e}");
            exit::USAGE
        })?;
        return Ok(vec![Endpoint {
            label: None,
            url,
            tls: None,
        }]);
    }
    let config = super::load_config(config_path)?;
    let node = super::status::select_nodes(&config, &[target.to_string()])?
        .into_iter()
        .next()
        .ok_or(exit::USAGE)?;
    let levels = node.fallback.len() + 1;
    let mut found = Vec::new();
    for (i, source) in node.sources().enumerate() {
        let label = if levels == 1 {
            node.name.clone()
        } else {
            format!("{} (level {})", node.name, i + 1)
        };
        let (url, tls) = match source {
            PowerSource::Redfish(t) => (t.endpoint.clone(), t.tls.clone()),
            PowerSource::Vsphere(t) => (t.endpoint.clone(), t.tls.clone()),
            PowerSource::Aws(t) => match &t.endpoint {
                Some(url) => (url.clone(), t.tls.clone()),
                None => continue,
            },
            // A kubeconfig carries its own CA.
            PowerSource::Ipmi(_) | PowerSource::Exec(_) | PowerSource::Kubevirt(_) => continue,
        };
        if url.scheme() != "https" {
            eprintln!("note: {label}: {url} is plain HTTP: there is no certificate to check");
            continue;
        }
        found.push(Endpoint {
            label: Some(label),
            url,
            tls: Some(tls),
        });
    }
    if found.is_empty() {
        eprintln!(
            "error: node {target} has no HTTPS endpoint in the inventory (IPMI, fence agents \
             and AWS's own endpoints have no certificate to pin)"
        );
        return Err(exit::USAGE);
    }
    Ok(found)
}

async fn report(endpoint: &Endpoint, timeout: Duration) -> Report {
    let mut report = Report {
        node: endpoint.label.clone(),
        endpoint: endpoint.url.to_string(),
        protocol: None,
        certificate: None,
        chain_length: 0,
        current_setting: endpoint.tls.as_ref().map(describe_setting),
        verdict: None,
        inventory_line: None,
        error: None,
        pem: None,
    };
    let presented = match probe::presented_chain(&endpoint.url, timeout).await {
        Ok(p) => p,
        Err(e) => {
            report.error = Some(e.0);
            return report;
        }
    };
    report.protocol = Some(presented.protocol.clone());
    report.chain_length = presented.chain.len().saturating_sub(1);
    let Some(leaf) = presented.chain.first() else {
        report.error = Some("no certificate".into());
        return report;
    };
    report.pem = Some(pem_of(leaf.as_ref()));
    match CertSummary::parse(leaf.as_ref()) {
        Ok(summary) => {
            report.inventory_line = Some(format!("tls_fingerprint = \"{}\"", summary.sha256));
            report.certificate = Some(summary);
        }
        Err(e) => report.error = Some(e.to_string()),
    }
    if let Some(tls) = &endpoint.tls {
        report.verdict = Some(match crate::tls::verifier(tls) {
            Ok(verifier) => match probe::check(&verifier, &presented) {
                Ok(()) => "accepted".to_string(),
                Err(refusal) => format!("refused: {}", refusal.message),
            },
            Err(e) => format!("cannot be checked: {e}"),
        });
    }
    report
}

fn describe_setting(tls: &TlsSettings) -> String {
    if tls.insecure {
        "insecure = true (nothing is checked)".to_string()
    } else if let Some(pin) = &tls.fingerprint {
        format!("tls_fingerprint = \"{pin}\"")
    } else if let Some(ca) = &tls.ca_file {
        format!("ca_file = {}", ca.display())
    } else {
        "the system trust store".to_string()
    }
}

fn pem_of(der: &[u8]) -> String {
    use base64::Engine as _;
    let text = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in text.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(chunk));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}

fn render(reports: &[Report]) -> String {
    let now = SystemTime::now();
    let mut out = String::new();
    for r in reports {
        let mut lines: Vec<(&str, String)> = Vec::new();
        if let Some(node) = &r.node {
            lines.push(("node", node.clone()));
        }
        lines.push(("endpoint", r.endpoint.clone()));
        if let Some(error) = &r.error {
            lines.push(("error", error.clone()));
        }
        if let Some(c) = &r.certificate {
            let validity = match c.validity_at(now) {
                Validity::Valid => "valid now",
                Validity::Expired { .. } => "EXPIRED",
                Validity::NotYetValid { .. } => "NOT YET VALID",
            };
            lines.push(("subject", c.subject.clone()));
            lines.push((
                "issuer",
                if c.self_issued {
                    format!("{} (self-signed)", c.issuer)
                } else {
                    c.issuer.clone()
                },
            ));
            lines.push(("names", c.names_text()));
            lines.push((
                "validity",
                format!(
                    "{} to {} ({validity})",
                    date(c.not_before),
                    date(c.not_after)
                ),
            ));
            lines.push((
                "CA",
                if c.is_ca {
                    "yes (basicConstraints CA:TRUE)".to_string()
                } else {
                    "no".to_string()
                },
            ));
            lines.push(("fingerprint", c.sha256.to_string()));
            if r.chain_length > 0 {
                lines.push(("chain", format!("{} more certificate(s)", r.chain_length)));
            }
        }
        if let Some(setting) = &r.current_setting {
            lines.push(("trust now", setting.clone()));
        }
        if let Some(verdict) = &r.verdict {
            lines.push(("verdict", verdict.clone()));
        }
        let width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
        for (k, v) in &lines {
            out.push_str(&format!(
                "{:<width$} {}\n",
                format!("{k}:"),
                crate::untrusted::line(v)
            ));
        }
        if let Some(line) = &r.inventory_line {
            out.push_str(&format!(
                "\nTo trust exactly this certificate, put this line in the node's (or its \
                 group's) inventory entry:\n    {line}\nFirst compare the fingerprint with \
                 the one the BMC itself shows (its web interface's certificate page, or its \
                 console): this connection was not authenticated.\n"
            ));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn pem_round_trips_through_rustls() {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let der = b"0123456789abcdef".repeat(10);
        let pem = super::pem_of(&der);
        let back = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        assert_eq!(back.as_ref(), der.as_slice());
        assert!(pem.lines().all(|l| l.len() <= 64 || l.starts_with("-----")));
    }
}
