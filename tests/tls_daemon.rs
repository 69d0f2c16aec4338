//! `nodefence run` behind a BMC presenting a self-signed `CA:TRUE` certificate, as
//! most BMCs ship: trusted through `ca_file` (that certificate) or a `tls_fingerprint`
//! pin, the daemon proves a dead machine off and releases it, and powers a cut-off
//! one off first. Trusting another certificate instead, nothing is released and the
//! Events say why. No `insecure` anywhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::world::*;
use nodefence::config::PowerSource;
use nodefence_mocks::redfish::MockPower;
use nodefence_mocks::tls::CertKind;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_fences_through_a_bmcs_own_certificate_trusted_by_file_or_pin() {
    for trust in [BmcTrust::CaFile, BmcTrust::Pin] {
        // Five workers: two unhealthy at once stay within storm protection (40%).
        let w = WorldBuilder::new()
            .workers(5)
            .bmc_tls(CertKind::SelfSigned, trust)
            .start()
            .await;
        assert!(w.bmc.base_url().starts_with("https://"));
        let victim = w.db_placed().await;
        w.pull_plug(&victim);
        w.released_and_moved(&victim).await;
        w.expect_event(&victim, "ConfirmedOff").await;

        // A network cut: the machine is On; the daemon powers it off over TLS.
        let other = ["worker-1", "worker-2", "worker-3", "worker-4", "worker-5"]
            .into_iter()
            .find(|n| *n != victim)
            .unwrap();
        w.cut_network(other);
        eventually(
            &format!("{other} powered off and released ({trust:?})"),
            Duration::from_secs(45),
            || async { w.has_out_of_service_taint(other) },
        )
        .await;
        assert_eq!(w.resets_of(other), vec!["ForceOff".to_string()]);
        assert_eq!(w.power_of(other), Some(MockPower::Off));
        w.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusting_another_certificate_releases_nothing_and_says_why() {
    let impostor_pem = nodefence_mocks::tls::TlsMaterial::generate_kind(
        CertKind::SelfSigned,
        nodefence_mocks::tls::LOOPBACK_NAMES,
    )
    .unwrap()
    .cert_pem()
    .to_string();
    for trust in [BmcTrust::CaFile, BmcTrust::Pin] {
        let mut w = WorldBuilder::new()
            .bmc_tls(CertKind::SelfSigned, trust)
            .replicas(&[])
            .start()
            .await;
        // The inventory trusts a certificate the BMC does not present.
        match trust {
            BmcTrust::CaFile => {
                std::fs::write(w._dir.path().join("bmc.pem"), &impostor_pem).unwrap();
            }
            BmcTrust::Pin => {
                use rustls::pki_types::pem::PemObject;
                let der =
                    rustls::pki_types::CertificateDer::from_pem_slice(impostor_pem.as_bytes())
                        .unwrap();
                let pin = nodefence::tls::CertFingerprint::of(der.as_ref());
                for node in w.config.inventory.nodes.values_mut() {
                    if let PowerSource::Redfish(t) = &mut node.power {
                        t.tls.fingerprint = Some(pin);
                    }
                }
            }
        }
        w.start_replica("replica");
        let victim = w.db_placed().await;
        w.pull_plug(&victim);
        let events = w
            .expect_event_where("BmcCheckFailed", |e| {
                e["note"].as_str().unwrap_or_default().contains("tls")
            })
            .await;
        let note = events[0]["note"].as_str().unwrap();
        assert!(
            note.contains("self-signed") || note.contains("does not match tls_fingerprint"),
            "{trust:?}: {note}"
        );
        eventually(
            &format!("{victim} NotReady"),
            Duration::from_secs(30),
            || async { !w.node_ready(&victim) },
        )
        .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            !w.has_out_of_service_taint(&victim),
            "{trust:?}: nothing is released without a trusted reading"
        );
        assert!(w.bmc.request_log().is_empty(), "no request reached the BMC");
        assert!(w.bmc.reset_log().is_empty());
        w.stop().await;
    }
}
