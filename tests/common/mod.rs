//! Shared helpers for integration tests: targets and drivers aimed at a mock BMC,
//! ([`world`]) the end-to-end harness (fake-kube, simulation, mock BMC, daemon replicas),
//! and ([`netns`]) nodes in network namespaces with a real DNS server for the cluster's.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod kubevirt;
pub mod netns;
pub mod world;

#[path = "../cli_common/mod.rs"]
pub mod cli_common;
#[path = "../deploy_common/mod.rs"]
pub mod deploy_common;
#[path = "../peers/moto.rs"]
pub mod moto;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nodefence::config::{
    Credential, NodeTarget, PowerSource, RedfishAuth, RedfishTarget, SecretSource, Timeouts,
    TlsSettings,
};
use nodefence::power::PowerDriver;
use nodefence::power::confirm::ConfirmPolicy;
use nodefence::power::registry::DriverFactory;
use nodefence_mocks::redfish::MockRedfishHandle;

pub const USER: &str = "fence";
pub const PASSWORD: &str = "s3cr3t-Pa55";

/// Short deadlines so failure paths finish quickly.
pub fn fast_timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(2),
        request: Duration::from_secs(2),
        operation: Duration::from_secs(8),
        retries: 3,
    }
}

pub fn policy() -> ConfirmPolicy {
    ConfirmPolicy {
        readings: 3,
        interval: Duration::from_millis(50),
        timeout: Duration::from_secs(5),
    }
}

pub struct Target {
    pub target: RedfishTarget,
    /// Keeps the CA file alive.
    pub _dir: tempfile::TempDir,
}

/// A Redfish target for `mock`, trusting its CA when it serves HTTPS.
pub fn target(mock: &MockRedfishHandle, system_id: Option<&str>) -> Target {
    let dir = tempfile::tempdir().unwrap();
    let ca_file: Option<PathBuf> = mock.ca_pem().map(|pem| {
        let p = dir.path().join("ca.pem");
        std::fs::write(&p, pem).unwrap();
        p
    });
    Target {
        target: RedfishTarget {
            endpoint: mock.base_url().parse().unwrap(),
            system_id: system_id.map(str::to_string),
            credential: Credential {
                username: USER.into(),
                password: PASSWORD.to_string().into(),
                source: SecretSource::Inline,
            },
            auth: RedfishAuth::Auto,
            tls: TlsSettings {
                ca_file,
                ..TlsSettings::default()
            },
            timeouts: fast_timeouts(),
        },
        _dir: dir,
    }
}

pub fn driver(target: &RedfishTarget) -> Arc<dyn PowerDriver> {
    nodefence::tls::install_crypto_provider();
    let factory = DriverFactory::new(8);
    factory
        .driver(&NodeTarget {
            fallback: Vec::new(),
            origin: Default::default(),
            metal3_host: None,
            name: "worker-1".into(),
            group: None,
            power: PowerSource::Redfish(target.clone()),
            policy: Default::default(),
        })
        .unwrap()
}
