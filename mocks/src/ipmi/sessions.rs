//! The BMC's session table: half-open sessions between Open Session and RAKP 3, and
//! established ones with their keys, sequence numbers and privilege.
//!
//! Session ids (SIDc), Rc and IVs are fresh random numbers from the OS. Half-open
//! sessions count against the session limit, as on real BMCs, and expire after the
//! handshake timeout; established ones after the inactivity timeout.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use nodefence_ipmi_proto::command::Privilege;
use nodefence_ipmi_proto::crypto::{CipherSuite, RakpContext, SessionKeys};
use nodefence_ipmi_proto::seq;
use tokio::time::Instant;

/// `N` random bytes from the OS; `None` (and a warning) if it fails.
pub(crate) fn random<const N: usize>() -> Option<[u8; N]> {
    let mut buf = [0u8; N];
    match getrandom::fill(&mut buf) {
        Ok(()) => Some(buf),
        Err(e) => {
            tracing::warn!("mock IPMI BMC: no random numbers: {e}");
            None
        }
    }
}

/// RAKP 2 was sent: what RAKP 3 is checked against.
#[derive(Debug)]
pub(crate) struct Rakp2Sent {
    pub(crate) ctx: RakpContext,
    /// Index into the configured users.
    pub(crate) user: usize,
    /// The privilege requested in RAKP 1 (becomes the session's maximum).
    pub(crate) max_privilege: Privilege,
    /// RAKP 1 fields, to recognise a retransmission.
    pub(crate) rakp1: (Vec<u8>, [u8; 16], u8),
    /// The RAKP 2 payload, re-sent for a retransmitted RAKP 1.
    pub(crate) rakp2: Vec<u8>,
}

/// An established session.
#[derive(Debug)]
pub(crate) struct Active {
    pub(crate) keys: SessionKeys,
    pub(crate) inbound: seq::Inbound,
    pub(crate) outbound: seq::Outbound,
    pub(crate) privilege: Privilege,
    pub(crate) max_privilege: Privilege,
    pub(crate) username: String,
    /// The RAKP 3 auth code that opened it and the RAKP 4 payload answered, to
    /// re-answer a retransmitted RAKP 3.
    pub(crate) rakp3_code: Vec<u8>,
    pub(crate) rakp4: Vec<u8>,
}

#[derive(Debug)]
pub(crate) enum Phase {
    /// Open Session answered; waiting for RAKP 1.
    Opened,
    Rakp2Sent(Box<Rakp2Sent>),
    Active(Box<Active>),
}

#[derive(Debug)]
pub(crate) struct Session {
    /// SIDc (our id; the key of the table).
    pub(crate) bmc_id: u32,
    /// SIDm (the console's id; goes into every packet we send).
    pub(crate) console_id: u32,
    pub(crate) peer: SocketAddr,
    pub(crate) suite: CipherSuite,
    /// Open Session's requested maximum privilege (0: the highest the user has).
    pub(crate) requested: u8,
    pub(crate) phase: Phase,
    pub(crate) last_activity: Instant,
}

impl Session {
    pub(crate) fn is_active(&self) -> bool {
        matches!(self.phase, Phase::Active(_))
    }
}

#[derive(Debug, Default)]
pub(crate) struct SessionTable {
    map: HashMap<u32, Session>,
}

impl SessionTable {
    /// Sessions in any phase (what the session limit counts).
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn active_count(&self) -> usize {
        self.map.values().filter(|s| s.is_active()).count()
    }

    pub(crate) fn get_mut(&mut self, bmc_id: u32) -> Option<&mut Session> {
        self.map.get_mut(&bmc_id)
    }

    pub(crate) fn contains_active(&self, bmc_id: u32) -> bool {
        self.map.get(&bmc_id).is_some_and(Session::is_active)
    }

    pub(crate) fn remove(&mut self, bmc_id: u32) -> Option<Session> {
        self.map.remove(&bmc_id)
    }

    pub(crate) fn insert(&mut self, session: Session) {
        self.map.insert(session.bmc_id, session);
    }

    /// A random, non-zero id not in use.
    pub(crate) fn fresh_id(&self) -> Option<u32> {
        (0..8).find_map(|_| {
            let id = u32::from_le_bytes(random::<4>()?);
            (id != 0 && !self.map.contains_key(&id)).then_some(id)
        })
    }

    /// The session a repeated Open Session Request (same console, same SIDm, same
    /// suite) already opened, if it is still waiting for RAKP 1.
    pub(crate) fn find_opened(
        &self,
        peer: SocketAddr,
        console_id: u32,
        suite: CipherSuite,
    ) -> Option<u32> {
        self.map
            .values()
            .find(|s| {
                matches!(s.phase, Phase::Opened)
                    && s.peer == peer
                    && s.console_id == console_id
                    && s.suite == suite
            })
            .map(|s| s.bmc_id)
    }

    /// Forgets half-open sessions from this console with this SIDm: it started over.
    pub(crate) fn remove_half_open(&mut self, peer: SocketAddr, console_id: u32) {
        self.map
            .retain(|_, s| s.is_active() || s.peer != peer || s.console_id != console_id);
    }

    /// Removes sessions idle too long; returns the ids of the established ones removed.
    pub(crate) fn expire(&mut self, now: Instant, idle: Duration, handshake: Duration) -> Vec<u32> {
        let mut ended = Vec::new();
        self.map.retain(|&id, s| {
            let limit = if s.is_active() { idle } else { handshake };
            let keep = now.saturating_duration_since(s.last_activity) < limit;
            if !keep && s.is_active() {
                ended.push(id);
            }
            keep
        });
        ended
    }

    /// Removes every established session; returns their ids.
    pub(crate) fn remove_all_active(&mut self) -> Vec<u32> {
        let ids: Vec<u32> = self
            .map
            .values()
            .filter(|s| s.is_active())
            .map(|s| s.bmc_id)
            .collect();
        for id in &ids {
            self.map.remove(id);
        }
        ids
    }
}
