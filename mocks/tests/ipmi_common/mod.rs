//! Helpers shared by the mock-IPMI integration tests: a small remote console
//! written with `nodefence-ipmi-proto` that talks to the BMC over real UDP, the
//! RMCP+ handshake (cipher suites 3 and 17, K_g) as a console performs it, an
//! established session's sealed requests, and bounded polling instead of sleeps.
//!
//! "No reply" is never asserted by waiting: a test waits (bounded) for the counter
//! that records the drop, then checks that the next datagram it receives is the
//! answer to a later request, so a stray reply would be caught.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use nodefence_ipmi_proto::command::{self as cmd, ChassisStatus};
use nodefence_ipmi_proto::crypto::{Credentials, RakpContext, SessionKeys};
use nodefence_ipmi_proto::message::{IpmiMessage, NETFN_APP, NETFN_CHASSIS};
use nodefence_ipmi_proto::rakp::{
    OpenSessionRequest, OpenSessionResponse, Rakp1, Rakp2, Rakp3, Rakp4,
};
use nodefence_ipmi_proto::rmcp::{self, Packet, PayloadType, V2Header};
use nodefence_ipmi_proto::{Error as ProtoError, seq, session};
use nodefence_mocks::ipmi::{
    ChassisControl, CipherSuite, Counters, MockIpmi, MockIpmiHandle, Privilege, status,
};
use tokio::net::UdpSocket;
use tokio::time::{Instant, timeout};

const REPLY_WAIT: Duration = Duration::from_secs(2);
pub const SUITES: [CipherSuite; 2] = [CipherSuite::Suite3, CipherSuite::Suite17];
const ADMIN_ROLE: u8 = 0x14; // ADMINISTRATOR, name-only lookup
pub const GUID: [u8; 16] = *b"nodefence-guid-1";

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).unwrap();
    b
}

/// Polls `check` until it holds (bounded), instead of sleeping.
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub async fn counted(bmc: &MockIpmiHandle, what: &str, f: impl Fn(&Counters) -> u64, want: u64) {
    eventually(what, || f(&bmc.counters()) == want).await;
}

/// A UDP socket talking to one BMC.
pub struct Console {
    sock: UdpSocket,
}

impl Console {
    pub async fn to(addr: SocketAddr) -> Self {
        let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        sock.connect(addr).await.unwrap();
        Self { sock }
    }

    pub async fn send(&self, bytes: &[u8]) {
        self.sock.send(bytes).await.unwrap();
    }

    pub async fn recv(&self) -> Vec<u8> {
        let mut buf = vec![0u8; 2048];
        let n = timeout(REPLY_WAIT, self.sock.recv(&mut buf))
            .await
            .expect("a reply in time")
            .unwrap();
        buf.truncate(n);
        buf
    }

    /// A pre-session v2.0 exchange: sends `body` as `t`, returns the reply payload.
    pub async fn ask(&self, t: PayloadType, body: &[u8], want: PayloadType) -> Vec<u8> {
        self.send(&rmcp::encode_v2_plain(&V2Header::pre_session(t), body).unwrap())
            .await;
        let reply = self.recv().await;
        match rmcp::split(&reply).unwrap() {
            Packet::V2 {
                header, payload, ..
            } => {
                assert_eq!(header, V2Header::pre_session(want));
                payload.to_vec()
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    /// An IPMI request outside a session in v1.5 framing.
    pub async fn ask_v15(&self, msg: &IpmiMessage) -> IpmiMessage {
        self.send(&rmcp::encode_v15(0, 0, &msg.encode().unwrap()).unwrap())
            .await;
        let reply = self.recv().await;
        match rmcp::split(&reply).unwrap() {
            Packet::V15 {
                session_seq: 0,
                session_id: 0,
                message,
            } => IpmiMessage::decode(message).unwrap(),
            other => panic!("unexpected {other:?}"),
        }
    }

    /// An IPMI request outside a session in v2.0 framing (as ipmitool sends Get
    /// Channel Cipher Suites).
    pub async fn ask_v2(&self, msg: &IpmiMessage) -> IpmiMessage {
        let t = PayloadType::IpmiMessage;
        IpmiMessage::decode(&self.ask(t, &msg.encode().unwrap(), t).await).unwrap()
    }
}

/// How the console logs in.
#[derive(Clone, Copy)]
pub struct Login<'a> {
    pub user: &'a str,
    pub password: &'a str,
    pub kg: Option<&'a [u8]>,
    pub suite: CipherSuite,
    /// RAKP 1 role byte.
    pub role: u8,
    /// Open Session's requested maximum privilege.
    pub open_privilege: u8,
    /// Send RAKP 3 keyed with this password (and skip checking RAKP 2).
    pub rakp3_password: Option<&'a str>,
}

impl<'a> Login<'a> {
    pub fn new(user: &'a str, password: &'a str, suite: CipherSuite) -> Self {
        Self {
            user,
            password,
            kg: None,
            suite,
            role: ADMIN_ROLE,
            open_privilege: 0,
            rakp3_password: None,
        }
    }

    pub fn admin(suite: CipherSuite) -> Self {
        Self::new("admin", "password", suite)
    }

    pub fn role(self, role: u8) -> Self {
        Self { role, ..self }
    }
}

/// Where a handshake stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    Open(u8),
    Rakp2(u8),
    Rakp2Mismatch,
    Rakp4(u8),
    Rakp4Mismatch,
}

/// An established session, console side.
pub struct Session {
    pub console: Console,
    pub keys: SessionKeys,
    pub bmc_id: u32,
    pub console_id: u32,
    pub guid: [u8; 16],
    pub out: seq::Outbound,
    pub rq: u8,
}

static NEXT_CONSOLE_ID: AtomicU32 = AtomicU32::new(0x0A00_0001);

pub async fn login(bmc: &MockIpmiHandle, l: Login<'_>) -> Result<Session, Refused> {
    login_at(bmc.addr(), l).await
}

pub async fn login_at(addr: SocketAddr, l: Login<'_>) -> Result<Session, Refused> {
    let console = Console::to(addr).await;
    let console_id = NEXT_CONSOLE_ID.fetch_add(1, Ordering::Relaxed);
    let suite = l.suite;
    let open = OpenSessionRequest {
        tag: 1,
        max_privilege: l.open_privilege,
        console_session_id: console_id,
        algorithms: suite.algorithms(),
    };
    let t = PayloadType::OpenSessionRequest;
    let body = console
        .ask(t, &open.encode(), PayloadType::OpenSessionResponse)
        .await;
    let resp = OpenSessionResponse::decode(&body).unwrap();
    assert_eq!((resp.tag, resp.console_session_id), (1, console_id));
    let Some(acc) = resp.accepted else {
        return Err(Refused::Open(resp.status));
    };
    assert_eq!(acc.algorithms, suite.algorithms());
    let rm = random::<16>();
    let r1 = Rakp1 {
        tag: 2,
        bmc_session_id: acc.bmc_session_id,
        console_random: rm,
        role: l.role,
        username: l.user.as_bytes().to_vec(),
    };
    let body = console
        .ask(
            PayloadType::Rakp1,
            &r1.encode().unwrap(),
            PayloadType::Rakp2,
        )
        .await;
    let r2 = Rakp2::decode(&body, suite).unwrap();
    assert_eq!((r2.tag, r2.console_session_id), (2, console_id));
    let Some(a2) = r2.accepted else {
        return Err(Refused::Rakp2(r2.status));
    };
    let ctx = RakpContext {
        suite,
        console_session_id: console_id,
        bmc_session_id: acc.bmc_session_id,
        console_random: rm,
        bmc_random: a2.bmc_random,
        bmc_guid: a2.bmc_guid,
        role: l.role,
    };
    let creds = Credentials::new(l.user.as_bytes(), l.password.as_bytes(), l.kg).unwrap();
    let r3_creds = match l.rakp3_password {
        Some(p) => Credentials::new(l.user.as_bytes(), p.as_bytes(), l.kg).unwrap(),
        None => {
            ctx.verify_rakp2(&creds, &a2.auth_code)
                .map_err(|_| Refused::Rakp2Mismatch)?;
            Credentials::new(l.user.as_bytes(), l.password.as_bytes(), l.kg).unwrap()
        }
    };
    let r3 = Rakp3 {
        tag: 3,
        status: status::OK,
        bmc_session_id: acc.bmc_session_id,
        auth_code: ctx.rakp3_auth_code(&r3_creds),
    };
    let body = console
        .ask(
            PayloadType::Rakp3,
            &r3.encode(suite).unwrap(),
            PayloadType::Rakp4,
        )
        .await;
    let r4 = Rakp4::decode(&body, suite).unwrap();
    assert_eq!((r4.tag, r4.console_session_id), (3, console_id));
    if r4.status != status::OK {
        return Err(Refused::Rakp4(r4.status));
    }
    let keys = ctx.session_keys(&creds);
    ctx.verify_rakp4(&keys, &r4.icv)
        .map_err(|_| Refused::Rakp4Mismatch)?;
    Ok(Session {
        console,
        keys,
        bmc_id: acc.bmc_session_id,
        console_id,
        guid: a2.bmc_guid,
        out: seq::Outbound::default(),
        rq: 1,
    })
}

impl Session {
    pub fn request(&mut self, net_fn: u8, command: u8, data: &[u8]) -> IpmiMessage {
        let rq = self.rq;
        self.rq = (self.rq + 1) % 64;
        IpmiMessage::request(net_fn, command, rq, data.to_vec())
    }

    /// Seals `msg` for session `bmc_id` with sequence number `seq`.
    pub fn seal_as(&self, msg: &IpmiMessage, bmc_id: u32, seq: u32) -> Vec<u8> {
        let payload = msg.encode().unwrap();
        session::seal(
            &self.keys,
            PayloadType::IpmiMessage,
            bmc_id,
            seq,
            &payload,
            random(),
        )
        .unwrap()
    }

    pub fn seal(&mut self, msg: &IpmiMessage) -> Vec<u8> {
        let seq = self.out.next_seq();
        self.seal_as(msg, self.bmc_id, seq)
    }

    pub fn open(&self, datagram: &[u8]) -> Result<IpmiMessage, ProtoError> {
        let opened = session::open(&self.keys, datagram)?;
        assert_eq!(opened.session_id, self.console_id);
        IpmiMessage::decode(&opened.payload)
    }

    /// The next datagram, opened; it must answer `req`.
    pub async fn reply_to(&self, req: &IpmiMessage) -> IpmiMessage {
        let resp = self.open(&self.console.recv().await).unwrap();
        assert_eq!(
            (resp.net_fn, resp.seq, resp.cmd),
            (req.net_fn | 1, req.seq, req.cmd),
            "the next reply answers the latest request"
        );
        resp
    }

    pub async fn send(&mut self, msg: &IpmiMessage) {
        let bytes = self.seal(msg);
        self.console.send(&bytes).await;
    }

    pub async fn call(&mut self, net_fn: u8, command: u8, data: &[u8]) -> (u8, Vec<u8>) {
        let req = self.request(net_fn, command, data);
        self.send(&req).await;
        let resp = self.reply_to(&req).await;
        let (cc, rest) = cmd::split_completion(&resp.data).unwrap();
        (cc, rest.to_vec())
    }

    pub async fn status(&mut self) -> ChassisStatus {
        let (cc, data) = self
            .call(NETFN_CHASSIS, cmd::CMD_GET_CHASSIS_STATUS, &[])
            .await;
        assert_eq!(cc, cmd::CC_OK);
        ChassisStatus::decode(&data).unwrap()
    }

    pub async fn set_privilege(&mut self, p: Privilege) -> u8 {
        self.call(NETFN_APP, cmd::CMD_SET_SESSION_PRIVILEGE, &[p as u8])
            .await
            .0
    }

    pub async fn control(&mut self, op: ChassisControl) -> u8 {
        self.call(NETFN_CHASSIS, cmd::CMD_CHASSIS_CONTROL, &[op as u8])
            .await
            .0
    }

    pub async fn close(&mut self) -> u8 {
        let id = self.bmc_id.to_le_bytes();
        self.call(NETFN_APP, cmd::CMD_CLOSE_SESSION, &id).await.0
    }
}

pub async fn admin_session(bmc: &MockIpmiHandle, suite: CipherSuite) -> Session {
    let mut s = login(bmc, Login::admin(suite)).await.unwrap();
    assert_eq!(s.set_privilege(Privilege::Administrator).await, cmd::CC_OK);
    s
}

pub async fn bmc() -> MockIpmiHandle {
    MockIpmi::builder().guid(GUID).start().await.unwrap()
}

pub fn ops(bmc: &MockIpmiHandle) -> Vec<ChassisControl> {
    bmc.control_log().iter().map(|c| c.op).collect()
}
