//! A mock Redfish BMC for testing fencing clients against real HTTP(S).
//!
//! Fencing releases a node's volumes only once its machine is proven off, so the
//! client that asks the BMC must be tested against everything a BMC does: the
//! vendor differences in discovery and Reset handling ([`Profile`]), power
//! transitions that take time, sessions that expire, and the faults of real
//! hardware ([`Fault`]). Tests start one with [`MockRedfish::builder`] and steer it
//! through the returned [`MockRedfishHandle`]; scripts run the `mock-redfish` binary
//! and steer it over the `/admin` HTTP API (see the `admin` module docs).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use nodefence_mocks::redfish::{MockPower, MockRedfish, Profile, SystemSpec};
//!
//! let bmc = MockRedfish::builder()
//!     .profile(Profile::Idrac)
//!     .system(SystemSpec::new("System.Embedded.1").power(MockPower::On))
//!     .credentials("root", "calvin")
//!     .transition_delay(Duration::from_millis(200))
//!     .tls(true)
//!     .start()
//!     .await?;
//! // point the client at bmc.base_url(), trusting bmc.ca_pem() ...
//! assert!(bmc.reset_log().is_empty());
//! bmc.shutdown().await;
//! # Ok(()) }
//! ```

mod accounts;
mod admin;
mod faults;
mod fixture;
mod hostile;
mod model;
mod payloads;
mod profile;
mod reply;
mod resources;
mod server;
mod service;
mod sessions;
mod state;
mod tasks;

pub use accounts::{Account, BASIC_REQUIRED_MESSAGE, Role, SessionLogin};
pub use admin::PowerRequest;
pub use faults::{Fault, HOSTILE};
pub use fixture::{Fixture, FixtureError, FixtureSystem};
pub use model::{MockPower, ParsePowerError, SystemSpec};
pub use profile::{ParseProfileError, Profile, ResetResponse};
pub use server::{DEFAULT_PASSWORD, DEFAULT_USERNAME, MockRedfish, MockRedfishHandle, StartError};
pub use sessions::AuthKind;
pub use state::{RequestRecord, ResetRecord, SystemInfo, TimedRequest, TimedReset, UnknownSystem};
