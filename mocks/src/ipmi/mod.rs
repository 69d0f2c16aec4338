//! A mock IPMI v2.0 (RMCP+) BMC on a real UDP socket, for testing IPMI fencing
//! clients (nodefence's driver, ipmitool) without hardware.
//!
//! Fencing releases a node's volumes only once its machine is proven off, so the
//! client must be tested against everything a BMC does: the RMCP+ handshake with
//! cipher suites 3 and 17 (with or without K_g), users with privilege limits, session
//! sequence windows and timeouts, power changes that take time, and the failures of
//! real BMCs and networks ([`Fault`]). The protocol is
//! [`nodefence_ipmi_proto`]'s: this module only adds the BMC's state and its UDP
//! socket. One [`MockIpmi`] is one BMC on its own port; start several for a rack.
//! Tests steer a BMC through its [`MockIpmiHandle`]; scripts run the `mock-ipmi`
//! binary and steer it over the [`admin_router`] HTTP API.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use nodefence_mocks::ipmi::{CipherSuite, MockIpmi, Power, Privilege};
//!
//! let bmc = MockIpmi::builder()
//!     .user("fencer", "s3cret", Privilege::Operator)
//!     .suites([CipherSuite::Suite17])
//!     .guid(*b"0123456789abcdef")
//!     .transition_delay(Duration::from_millis(200))
//!     .start()
//!     .await?;
//! // point the client at bmc.addr() ...
//! assert_eq!(bmc.power(), Power::On);
//! assert!(bmc.control_log().is_empty());
//! bmc.shutdown().await;
//! # Ok(()) }
//! ```

mod admin;
mod commands;
mod dispatch;
mod faults;
mod fixture;
mod handshake;
mod model;
mod server;
mod sessions;
mod state;

pub use admin::admin_router;
pub use faults::{Fault, Garble};
pub use fixture::{Fixture, FixtureBmc, FixtureError, FixtureUser, read_password_file};
pub use handshake::status;
pub use model::{
    ParseError, Power, UserSpec, control_name, hex, parse_guid, parse_hex, parse_privilege,
    parse_suite,
};
pub use nodefence_ipmi_proto::command::{ChassisControl, Privilege};
pub use nodefence_ipmi_proto::crypto::CipherSuite;
pub use server::{
    DEFAULT_MAX_SESSIONS, DEFAULT_PASSWORD, DEFAULT_SESSION_TIMEOUT, DEFAULT_USERNAME, MockIpmi,
    MockIpmiHandle, StartError,
};
pub use state::{ControlRecord, Counters, DropCounters, RequestRecord, SessionEnd, SessionRecord};
