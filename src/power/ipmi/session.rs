//! One established RMCP+ session and the requests sent inside it.
//!
//! Every packet is encrypted and authenticated (suites 3 and 17). A reply counts only
//! if its AuthCode verifies with the session keys, it is addressed to our session id,
//! it carries an IPMI message, its sequence number is inside the window and not a
//! replay, its checksums hold and it echoes the request's netFn, command, rqSeq and
//! addresses. Anything else is discarded.

use nodefence_ipmi_proto::command;
use nodefence_ipmi_proto::crypto::SessionKeys;
use nodefence_ipmi_proto::message::IpmiMessage;
use nodefence_ipmi_proto::rmcp::PayloadType;
use nodefence_ipmi_proto::{seq, session};
use tokio::time::Instant;

use super::transport::{ExchangeError, Plan, Transport, Verdict};
use crate::power::PowerError;

/// An established session.
pub(crate) struct Session {
    keys: SessionKeys,
    console_id: u32,
    bmc_id: u32,
    outbound: seq::Outbound,
    inbound: seq::Inbound,
    rq_seq: u8,
    /// When the BMC last answered in this session.
    pub last_used: Instant,
    /// The System GUID, once read in this session (wire order).
    pub guid: Option<[u8; 16]>,
}

/// `N` random bytes from the operating system.
pub(crate) fn random<const N: usize>() -> Result<[u8; N], PowerError> {
    let mut out = [0u8; N];
    getrandom::fill(&mut out).map_err(|e| {
        PowerError::protocol(format!("no random numbers from the operating system: {e}"))
    })?;
    Ok(out)
}

/// A random non-zero session id.
pub(crate) fn random_id() -> Result<u32, PowerError> {
    loop {
        let id = u32::from_le_bytes(random()?);
        if id != 0 {
            return Ok(id);
        }
    }
}

pub(crate) fn codec_error(e: nodefence_ipmi_proto::Error) -> PowerError {
    PowerError::protocol(format!("cannot encode the request: {e}"))
}

/// Whether `reply` answers `request`: netFn + 1, command, rqSeq, addresses and LUNs
/// swapped. The reason when it does not.
pub(crate) fn answers(reply: &IpmiMessage, request: &IpmiMessage) -> Result<(), String> {
    if reply.net_fn != request.net_fn | 1 || reply.cmd != request.cmd || reply.seq != request.seq {
        return Err(format!(
            "reply netFn 0x{:02x} cmd 0x{:02x} rqSeq {} does not answer netFn 0x{:02x} cmd 0x{:02x} rqSeq {}",
            reply.net_fn, reply.cmd, reply.seq, request.net_fn, request.cmd, request.seq
        ));
    }
    if (reply.dst_addr, reply.dst_lun, reply.src_addr, reply.src_lun)
        != (
            request.src_addr,
            request.src_lun,
            request.dst_addr,
            request.dst_lun,
        )
    {
        return Err("reply addresses do not mirror the request's".into());
    }
    Ok(())
}

impl Session {
    /// The session RAKP 4 completed: keys, our id and the BMC's.
    pub(crate) fn new(keys: SessionKeys, console_id: u32, bmc_id: u32) -> Result<Self, PowerError> {
        Ok(Self {
            keys,
            console_id,
            bmc_id,
            outbound: seq::Outbound::default(),
            inbound: seq::Inbound::default(),
            rq_seq: random::<1>()?[0] & 0x3F,
            last_used: Instant::now(),
            guid: None,
        })
    }

    fn next_rq_seq(&mut self) -> u8 {
        self.rq_seq = (self.rq_seq + 1) & 0x3F;
        self.rq_seq
    }

    /// The sealed datagram carrying `body`, with the next sequence number and a new IV.
    fn seal(&mut self, body: &[u8]) -> Result<Vec<u8>, PowerError> {
        let seq = self.outbound.next_seq();
        session::seal(
            &self.keys,
            PayloadType::IpmiMessage,
            self.bmc_id,
            seq,
            body,
            random()?,
        )
        .map_err(codec_error)
    }

    /// Judges a datagram as the reply to `request` in this session.
    fn judge(&mut self, datagram: &[u8], request: &IpmiMessage) -> Verdict<(u8, Vec<u8>)> {
        let opened = match session::open(&self.keys, datagram) {
            Ok(o) => o,
            Err(e) => return Verdict::Discard(format!("not a packet of this session: {e}")),
        };
        if opened.session_id != self.console_id {
            return Verdict::Discard(format!(
                "authentic packet for session 0x{:08x}, ours is 0x{:08x}",
                opened.session_id, self.console_id
            ));
        }
        if opened.payload_type != PayloadType::IpmiMessage {
            return Verdict::Discard(format!("payload {:?}", opened.payload_type));
        }
        if let Err(e) = self.inbound.accept(opened.session_seq) {
            return Verdict::Discard(e.to_string());
        }
        let reply = match IpmiMessage::decode(&opened.payload) {
            Ok(r) => r,
            Err(e) => return Verdict::Discard(e.to_string()),
        };
        if let Err(why) = answers(&reply, request) {
            return Verdict::Discard(why);
        }
        match command::split_completion(&reply.data) {
            Ok((cc, data)) => Verdict::Accept((cc, data.to_vec())),
            Err(e) => Verdict::Fail(PowerError::protocol(e.to_string())),
        }
    }

    /// Sends the request `build(rqSeq)` and returns the completion code and data of
    /// its reply.
    pub(crate) async fn request(
        &mut self,
        t: &mut Transport,
        build: impl FnOnce(u8) -> IpmiMessage,
        plan: Plan,
    ) -> Result<(u8, Vec<u8>), ExchangeError> {
        let request = build(self.next_rq_seq());
        let body = request
            .encode()
            .map_err(|e| ExchangeError::Failed(codec_error(e)))?;
        let reply = t
            .exchange(self, |s| s.seal(&body), |s, d| s.judge(d, &request), plan)
            .await?;
        self.last_used = Instant::now();
        Ok(reply)
    }

    /// Sends Close Session without waiting for the reply: for a session we give up
    /// on (it stopped answering, its set-up failed, it idled too long), so that the
    /// BMC frees its slot now rather than at its session timeout. BMCs have only a
    /// few session slots.
    pub(crate) async fn abandon(mut self, t: &mut Transport, deadline: Instant) {
        let rq = self.next_rq_seq();
        let datagram = command::close_session(rq, self.bmc_id)
            .encode()
            .map_err(codec_error)
            .and_then(|body| self.seal(&body));
        match datagram {
            Ok(d) => t.send_only(&d, deadline).await,
            Err(e) => tracing::debug!(error = %e.message, "Close Session not sent"),
        }
    }

    /// Close Session, waiting for the reply within `plan`.
    pub(crate) async fn close(
        &mut self,
        t: &mut Transport,
        plan: Plan,
    ) -> Result<u8, ExchangeError> {
        let bmc_id = self.bmc_id;
        self.request(t, |rq| command::close_session(rq, bmc_id), plan)
            .await
            .map(|(cc, _)| cc)
    }
}
