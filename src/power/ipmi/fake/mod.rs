//! A scriptable fake BMC for the driver's unit tests: the BMC side of RMCP+, built
//! from `nodefence-ipmi-proto` on loopback UDP, with switches to misbehave (stay
//! silent, refuse suites, forge replies claiming Off, forget the session, ...).
//!
//! Not an independent implementation (that is what `tests/ipmi_peers.rs` is for); it
//! exists to drive the driver into every error path deterministically.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod session;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use nodefence_ipmi_proto::command::{self, ChannelAuthCapabilities};
use nodefence_ipmi_proto::crypto::{CipherSuite, Credentials, RakpContext};
use nodefence_ipmi_proto::message::{IpmiMessage, NETFN_APP};
use nodefence_ipmi_proto::rakp::{
    OpenSessionAccepted, OpenSessionRequest, OpenSessionResponse, Rakp1, Rakp2, Rakp2Accepted,
    Rakp3, Rakp4,
};
use nodefence_ipmi_proto::rmcp::{self, Packet, PayloadType, V2Header};
use nodefence_ipmi_proto::seq;
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

use self::session::{Active, in_session};

/// How the fake behaves; changeable while it runs.
#[derive(Debug, Clone)]
pub(super) struct Behaviour {
    pub user: &'static str,
    pub password: &'static str,
    pub kg: Option<Vec<u8>>,
    /// Report "K_g set" in the capabilities.
    pub kg_flag: bool,
    /// Suites accepted when proposed.
    pub suites: Vec<CipherSuite>,
    /// Answer every proposal with this suite (as pyghmi does with suite 3).
    pub choose: Option<CipherSuite>,
    /// Refuse with a 2-byte Open Session Response (as OpenIPMI does).
    pub short_refusal: bool,
    /// Answer nothing at all.
    pub silent: bool,
    /// In-session commands (netFn, cmd) never answered.
    pub ignore: Vec<(u8, u8)>,
    /// Before each Get Chassis Status reply, send forged replies claiming Off.
    pub forge: bool,
    /// Send only the forgeries, never the real Get Chassis Status reply.
    pub forge_only: bool,
    /// Swallow this many RAKP 3 messages, dropping the half-open session (as a BMC
    /// does when RAKP 4 is lost and RAKP 3 is resent).
    pub swallow_rakp3: u32,
    pub privilege_cc: u8,
    pub control_cc: u8,
    pub guid: [u8; 16],
    pub power_on: bool,
}

impl Default for Behaviour {
    fn default() -> Self {
        Self {
            user: "fence",
            password: "fake-Pass-1",
            kg: None,
            kg_flag: false,
            suites: vec![CipherSuite::Suite3, CipherSuite::Suite17],
            choose: None,
            short_refusal: false,
            silent: false,
            ignore: Vec::new(),
            forge: false,
            forge_only: false,
            swallow_rakp3: 0,
            privilege_cc: 0,
            control_cc: 0,
            guid: [
                0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE, 0x01, 0x23, 0x45, 0x67, 0x89, 0xAB,
                0xCD, 0xEF,
            ],
            power_on: true,
        }
    }
}

/// What the fake saw.
#[derive(Debug, Default, Clone)]
pub(super) struct Record {
    /// Suite id of each Open Session proposal (0: not 3 or 17); resends of the same
    /// request are recorded once.
    pub opens: Vec<u8>,
    /// (netFn, cmd, rqSeq, session) of each in-session request, resends included.
    pub requests: Vec<(u8, u8, u8, u32)>,
    pub closes: u32,
    last_open: Option<u32>,
}

impl Record {
    /// How many `netfn`/`cmd` datagrams arrived, resends included.
    pub fn count(&self, netfn: u8, cmd: u8) -> usize {
        self.requests
            .iter()
            .filter(|r| (r.0, r.1) == (netfn, cmd))
            .count()
    }

    /// How many distinct `netfn`/`cmd` requests arrived (resends counted once).
    pub fn distinct(&self, netfn: u8, cmd: u8) -> usize {
        let mut seen: Vec<_> = self
            .requests
            .iter()
            .filter(|r| (r.0, r.1) == (netfn, cmd))
            .collect();
        seen.sort_unstable();
        seen.dedup();
        seen.len()
    }
}

struct Pending {
    suite: CipherSuite,
    console_sid: u32,
    bmc_sid: u32,
    ctx: Option<RakpContext>,
}

pub(super) struct FakeBmc {
    pub addr: SocketAddr,
    pub behaviour: Arc<Mutex<Behaviour>>,
    pub record: Arc<Mutex<Record>>,
    forget: Arc<Mutex<bool>>,
    task: JoinHandle<()>,
}

impl Drop for FakeBmc {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeBmc {
    pub async fn start(behaviour: Behaviour) -> Self {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let behaviour = Arc::new(Mutex::new(behaviour));
        let record = Arc::new(Mutex::new(Record::default()));
        let forget = Arc::new(Mutex::new(false));
        let task = tokio::spawn(serve(
            socket,
            behaviour.clone(),
            record.clone(),
            forget.clone(),
        ));
        Self {
            addr,
            behaviour,
            record,
            forget,
            task,
        }
    }

    pub fn record(&self) -> Record {
        self.record.lock().unwrap().clone()
    }

    pub fn set(&self, f: impl FnOnce(&mut Behaviour)) {
        f(&mut self.behaviour.lock().unwrap());
    }

    /// Drops the established session, as a BMC does after its session timeout.
    pub fn forget_session(&self) {
        *self.forget.lock().unwrap() = true;
    }
}

fn plain(t: PayloadType, body: &[u8]) -> Vec<u8> {
    rmcp::encode_v2_plain(&V2Header::pre_session(t), body).unwrap()
}

async fn serve(
    socket: UdpSocket,
    behaviour: Arc<Mutex<Behaviour>>,
    record: Arc<Mutex<Record>>,
    forget: Arc<Mutex<bool>>,
) {
    let mut buf = vec![0u8; 2048];
    let mut pending: Option<Pending> = None;
    let mut active: Option<Active> = None;
    loop {
        let Ok((n, peer)) = socket.recv_from(&mut buf).await else {
            return;
        };
        if std::mem::take(&mut *forget.lock().unwrap()) {
            active = None;
        }
        let b = behaviour.lock().unwrap().clone();
        if b.silent {
            continue;
        }
        let replies = match rmcp::split(&buf[..n]) {
            Ok(Packet::V15 { message, .. }) => capabilities(&b, message),
            Ok(Packet::V2 {
                header, payload, ..
            }) => match header.payload_type {
                PayloadType::OpenSessionRequest => open_session(&b, payload, &mut pending, &record),
                PayloadType::Rakp1 => rakp1(&b, payload, &mut pending),
                PayloadType::Rakp3 if b.swallow_rakp3 > 0 => {
                    behaviour.lock().unwrap().swallow_rakp3 -= 1;
                    pending = None;
                    Vec::new()
                }
                PayloadType::Rakp3 => rakp3(&b, payload, &mut pending, &mut active),
                PayloadType::IpmiMessage => match active.as_mut() {
                    Some(a) => in_session(&b, a, &buf[..n], &behaviour, &record),
                    None => Vec::new(),
                },
                _ => Vec::new(),
            },
            Err(_) => Vec::new(),
        };
        for reply in replies {
            let _ = socket.send_to(&reply, peer).await;
        }
    }
}

fn capabilities(b: &Behaviour, message: &[u8]) -> Vec<Vec<u8>> {
    let Ok(req) = IpmiMessage::decode(message) else {
        return Vec::new();
    };
    if (req.net_fn, req.cmd) != (NETFN_APP, command::CMD_GET_CHANNEL_AUTH_CAPABILITIES) {
        return Vec::new();
    }
    let caps = ChannelAuthCapabilities {
        channel: 1,
        ipmi_v2: true,
        kg_set: b.kg_flag,
        non_null_users: true,
        null_users: false,
        anonymous_login: false,
    };
    let resp = req.response(0, &caps.encode()).encode().unwrap();
    vec![rmcp::encode_v15(0, 0, &resp).unwrap()]
}

fn open_session(
    b: &Behaviour,
    payload: &[u8],
    pending: &mut Option<Pending>,
    record: &Mutex<Record>,
) -> Vec<Vec<u8>> {
    let Ok(req) = OpenSessionRequest::decode(payload) else {
        return Vec::new();
    };
    let proposed = CipherSuite::from_algorithms(req.algorithms).ok();
    let mut seen = record.lock().unwrap();
    if seen.last_open != Some(req.console_session_id) {
        seen.last_open = Some(req.console_session_id);
        seen.opens.push(proposed.map_or(0, CipherSuite::id));
    }
    drop(seen);
    let chosen = b.choose.or(proposed.filter(|s| b.suites.contains(s)));
    let Some(suite) = chosen else {
        if b.short_refusal {
            return vec![plain(PayloadType::OpenSessionResponse, &[req.tag, 0x11])];
        }
        let refusal = OpenSessionResponse {
            tag: req.tag,
            status: 0x11,
            max_privilege: 0,
            console_session_id: req.console_session_id,
            accepted: None,
        };
        return vec![plain(PayloadType::OpenSessionResponse, &refusal.encode())];
    };
    let bmc_sid = 0x0200_0000 | u32::from(req.tag);
    *pending = Some(Pending {
        suite,
        console_sid: req.console_session_id,
        bmc_sid,
        ctx: None,
    });
    let resp = OpenSessionResponse {
        tag: req.tag,
        status: 0,
        max_privilege: req.max_privilege,
        console_session_id: req.console_session_id,
        accepted: Some(OpenSessionAccepted {
            bmc_session_id: bmc_sid,
            algorithms: suite.algorithms(),
        }),
    };
    vec![plain(PayloadType::OpenSessionResponse, &resp.encode())]
}

fn creds(b: &Behaviour) -> Credentials {
    Credentials::new(b.user.as_bytes(), b.password.as_bytes(), b.kg.as_deref()).unwrap()
}

fn rakp1(b: &Behaviour, payload: &[u8], pending: &mut Option<Pending>) -> Vec<Vec<u8>> {
    let (Ok(r1), Some(p)) = (Rakp1::decode(payload), pending.as_mut()) else {
        return Vec::new();
    };
    if r1.bmc_session_id != p.bmc_sid {
        return Vec::new();
    }
    if r1.username != b.user.as_bytes() {
        let refusal = Rakp2 {
            tag: r1.tag,
            status: 0x0D,
            console_session_id: p.console_sid,
            accepted: None,
        };
        return vec![plain(PayloadType::Rakp2, &refusal.encode(p.suite).unwrap())];
    }
    let ctx = RakpContext {
        suite: p.suite,
        console_session_id: p.console_sid,
        bmc_session_id: p.bmc_sid,
        console_random: r1.console_random,
        bmc_random: [0xB7; 16],
        bmc_guid: b.guid,
        role: r1.role,
    };
    let r2 = Rakp2 {
        tag: r1.tag,
        status: 0,
        console_session_id: p.console_sid,
        accepted: Some(Rakp2Accepted {
            bmc_random: ctx.bmc_random,
            bmc_guid: ctx.bmc_guid,
            auth_code: ctx.rakp2_auth_code(&creds(b)),
        }),
    };
    p.ctx = Some(ctx);
    vec![plain(PayloadType::Rakp2, &r2.encode(p.suite).unwrap())]
}

fn rakp3(
    b: &Behaviour,
    payload: &[u8],
    pending: &mut Option<Pending>,
    active: &mut Option<Active>,
) -> Vec<Vec<u8>> {
    let Some(p) = pending.as_ref() else {
        return Vec::new();
    };
    let (Ok(r3), Some(ctx)) = (Rakp3::decode(payload, p.suite), p.ctx.as_ref()) else {
        return Vec::new();
    };
    if r3.status != 0 {
        *pending = None;
        return Vec::new();
    }
    let creds = creds(b);
    let status = if ctx.verify_rakp3(&creds, &r3.auth_code).is_ok() {
        0
    } else {
        0x0F
    };
    let keys = ctx.session_keys(&creds);
    let r4 = Rakp4 {
        tag: r3.tag,
        status,
        console_session_id: p.console_sid,
        icv: if status == 0 {
            ctx.rakp4_icv(&keys)
        } else {
            Vec::new()
        },
    };
    let reply = plain(PayloadType::Rakp4, &r4.encode(p.suite).unwrap());
    if status == 0 {
        *active = Some(Active {
            keys,
            console_sid: p.console_sid,
            bmc_sid: p.bmc_sid,
            out: seq::Outbound::default(),
            last_seq: 0,
            last_datagram: Vec::new(),
        });
    }
    *pending = None;
    vec![reply]
}
