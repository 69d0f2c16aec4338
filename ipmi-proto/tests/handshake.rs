//! A full RMCP+ session set-up simulated in memory between a console side and a BMC
//! side, using only the crate's functions, for cipher suites 3 and 17.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nodefence_ipmi_proto::Error;
use nodefence_ipmi_proto::crypto::{CipherSuite, Credentials, RakpContext, SessionKeys};
use nodefence_ipmi_proto::message::{IpmiMessage, NETFN_CHASSIS};
use nodefence_ipmi_proto::rakp::{
    OpenSessionAccepted, OpenSessionRequest, OpenSessionResponse, Rakp1, Rakp2, Rakp2Accepted,
    Rakp3, Rakp4, STATUS_OK,
};
use nodefence_ipmi_proto::rmcp::{self, Packet, PayloadType, V2Header};
use nodefence_ipmi_proto::session;

const CONSOLE_SID: u32 = 0x0A0B_0C0D;
const BMC_SID: u32 = 0x5566_7788;

fn wrap(t: PayloadType, body: &[u8]) -> Vec<u8> {
    rmcp::encode_v2_plain(&V2Header::pre_session(t), body).unwrap()
}

fn unwrap(t: PayloadType, datagram: &[u8]) -> Vec<u8> {
    match rmcp::split(datagram).unwrap() {
        Packet::V2 {
            header, payload, ..
        } => {
            assert_eq!(header, V2Header::pre_session(t));
            payload.to_vec()
        }
        Packet::V15 { .. } => panic!("unexpected v1.5 packet"),
    }
}

/// Runs the handshake; returns (console keys, BMC keys) or the first verification error
/// seen by the console.
fn handshake(
    suite: CipherSuite,
    console: &Credentials,
    bmc: &Credentials,
) -> Result<(SessionKeys, SessionKeys), Error> {
    // Console → Open Session Request.
    let req = OpenSessionRequest {
        tag: 1,
        max_privilege: 4,
        console_session_id: CONSOLE_SID,
        algorithms: suite.algorithms(),
    };
    let wire = wrap(PayloadType::OpenSessionRequest, &req.encode());
    // BMC: accept the proposal.
    let got = OpenSessionRequest::decode(&unwrap(PayloadType::OpenSessionRequest, &wire))?;
    let bmc_suite = CipherSuite::from_algorithms(got.algorithms)?;
    let resp = OpenSessionResponse {
        tag: got.tag,
        status: STATUS_OK,
        max_privilege: got.max_privilege,
        console_session_id: got.console_session_id,
        accepted: Some(OpenSessionAccepted {
            bmc_session_id: BMC_SID,
            algorithms: got.algorithms,
        }),
    };
    let wire = wrap(PayloadType::OpenSessionResponse, &resp.encode());
    // Console: read response, send RAKP 1.
    let resp = OpenSessionResponse::decode(&unwrap(PayloadType::OpenSessionResponse, &wire))?;
    assert_eq!(resp.console_session_id, CONSOLE_SID);
    let acc = resp.accepted.unwrap();
    assert_eq!(CipherSuite::from_algorithms(acc.algorithms)?, suite);
    let rm = [0x5A; 16];
    let rakp1 = Rakp1 {
        tag: 2,
        bmc_session_id: acc.bmc_session_id,
        console_random: rm,
        role: 0x14,
        username: console.username().to_vec(),
    };
    let wire = wrap(PayloadType::Rakp1, &rakp1.encode()?);
    // BMC: RAKP 1 → RAKP 2.
    let r1 = Rakp1::decode(&unwrap(PayloadType::Rakp1, &wire))?;
    assert_eq!(r1.username, bmc.username());
    let bmc_ctx = RakpContext {
        suite: bmc_suite,
        console_session_id: got.console_session_id,
        bmc_session_id: r1.bmc_session_id,
        console_random: r1.console_random,
        bmc_random: [0xC3; 16],
        bmc_guid: [0x99; 16],
        role: r1.role,
    };
    let r2 = Rakp2 {
        tag: r1.tag,
        status: STATUS_OK,
        console_session_id: got.console_session_id,
        accepted: Some(Rakp2Accepted {
            bmc_random: bmc_ctx.bmc_random,
            bmc_guid: bmc_ctx.bmc_guid,
            auth_code: bmc_ctx.rakp2_auth_code(bmc),
        }),
    };
    let wire = wrap(PayloadType::Rakp2, &r2.encode(bmc_suite)?);
    // Console: verify RAKP 2, send RAKP 3.
    let r2 = Rakp2::decode(&unwrap(PayloadType::Rakp2, &wire), suite)?;
    let a2 = r2.accepted.unwrap();
    let ctx = RakpContext {
        suite,
        console_session_id: CONSOLE_SID,
        bmc_session_id: acc.bmc_session_id,
        console_random: rm,
        bmc_random: a2.bmc_random,
        bmc_guid: a2.bmc_guid,
        role: 0x14,
    };
    ctx.verify_rakp2(console, &a2.auth_code)?;
    let console_keys = ctx.session_keys(console);
    let r3 = Rakp3 {
        tag: 3,
        status: STATUS_OK,
        bmc_session_id: acc.bmc_session_id,
        auth_code: ctx.rakp3_auth_code(console),
    };
    let wire = wrap(PayloadType::Rakp3, &r3.encode(suite)?);
    // BMC: verify RAKP 3, send RAKP 4.
    let r3 = Rakp3::decode(&unwrap(PayloadType::Rakp3, &wire), bmc_suite)?;
    bmc_ctx.verify_rakp3(bmc, &r3.auth_code)?;
    let bmc_keys = bmc_ctx.session_keys(bmc);
    let r4 = Rakp4 {
        tag: r3.tag,
        status: STATUS_OK,
        console_session_id: bmc_ctx.console_session_id,
        icv: bmc_ctx.rakp4_icv(&bmc_keys),
    };
    let wire = wrap(PayloadType::Rakp4, &r4.encode(bmc_suite)?);
    // Console: verify RAKP 4.
    let r4 = Rakp4::decode(&unwrap(PayloadType::Rakp4, &wire), suite)?;
    assert_eq!(r4.console_session_id, CONSOLE_SID);
    ctx.verify_rakp4(&console_keys, &r4.icv)?;
    Ok((console_keys, bmc_keys))
}

fn creds(user: &[u8], pass: &[u8], kg: Option<&[u8]>) -> Credentials {
    Credentials::new(user, pass, kg).unwrap()
}

fn exchange(console: &SessionKeys, bmc: &SessionKeys) {
    // Console → BMC: Get Chassis Status, addressed to the BMC's session id.
    let req = IpmiMessage::request(NETFN_CHASSIS, 0x01, 5, vec![]);
    let pkt = session::seal(
        console,
        PayloadType::IpmiMessage,
        BMC_SID,
        1,
        &req.encode().unwrap(),
        [0x11; 16],
    )
    .unwrap();
    let opened = session::open(bmc, &pkt).unwrap();
    assert_eq!((opened.session_id, opened.session_seq), (BMC_SID, 1));
    let got = IpmiMessage::decode(&opened.payload).unwrap();
    assert_eq!(got, req);
    // BMC → console: power is on.
    let resp = got.response(0x00, &[0x01, 0x00, 0x00]);
    let pkt = session::seal(
        bmc,
        PayloadType::IpmiMessage,
        CONSOLE_SID,
        1,
        &resp.encode().unwrap(),
        [0x22; 16],
    )
    .unwrap();
    let opened = session::open(console, &pkt).unwrap();
    assert_eq!(opened.session_id, CONSOLE_SID);
    assert_eq!(IpmiMessage::decode(&opened.payload).unwrap(), resp);
}

fn suites() -> [CipherSuite; 2] {
    [CipherSuite::Suite3, CipherSuite::Suite17]
}

#[test]
fn handshake_and_exchange_both_suites() {
    for suite in suites() {
        let c = creds(b"operator", b"s3cret", None);
        let b = creds(b"operator", b"s3cret", None);
        let (ck, bk) = handshake(suite, &c, &b).unwrap();
        assert_eq!(ck.k1(), bk.k1());
        assert_eq!(ck.k2(), bk.k2());
        exchange(&ck, &bk);
    }
}

#[test]
fn handshake_with_kg_and_max_lengths() {
    for suite in suites() {
        let kg = [0x42; 20];
        let c = creds(&[b'u'; 16], &[b'p'; 20], Some(&kg));
        let b = creds(&[b'u'; 16], &[b'p'; 20], Some(&kg));
        let (ck, bk) = handshake(suite, &c, &b).unwrap();
        exchange(&ck, &bk);
    }
}

#[test]
fn wrong_password_fails_rakp2_at_console() {
    for suite in suites() {
        let c = creds(b"admin", b"wrong", None);
        let b = creds(b"admin", b"right", None);
        assert_eq!(handshake(suite, &c, &b).err(), Some(Error::Rakp2Mismatch));
    }
}

#[test]
fn wrong_password_fails_rakp3_at_bmc() {
    for suite in suites() {
        let ctx = RakpContext {
            suite,
            console_session_id: CONSOLE_SID,
            bmc_session_id: BMC_SID,
            console_random: [1; 16],
            bmc_random: [2; 16],
            bmc_guid: [3; 16],
            role: 0x14,
        };
        let console = creds(b"admin", b"wrong", None);
        let bmc = creds(b"admin", b"right", None);
        let code = ctx.rakp3_auth_code(&console);
        assert_eq!(ctx.verify_rakp3(&bmc, &code), Err(Error::Rakp3Mismatch));
        assert_eq!(ctx.verify_rakp3(&console, &code), Ok(()));
        // Truncated or empty codes never verify.
        assert_eq!(
            ctx.verify_rakp3(&console, &code[..code.len() - 1]),
            Err(Error::Rakp3Mismatch)
        );
        assert_eq!(ctx.verify_rakp3(&console, &[]), Err(Error::Rakp3Mismatch));
    }
}

#[test]
fn wrong_kg_fails_rakp4() {
    for suite in suites() {
        let c = creds(b"admin", b"pw", Some(b"console-kg"));
        let b = creds(b"admin", b"pw", Some(b"bmc-kg"));
        assert_eq!(handshake(suite, &c, &b).err(), Some(Error::Rakp4Mismatch));
        // K_g on one side only.
        let c = creds(b"admin", b"pw", None);
        let b = creds(b"admin", b"pw", Some(b"bmc-kg"));
        assert_eq!(handshake(suite, &c, &b).err(), Some(Error::Rakp4Mismatch));
    }
}

#[test]
fn session_keys_do_not_cross_suites_or_sessions() {
    let c = creds(b"admin", b"pw", None);
    let (k3, _) = handshake(CipherSuite::Suite3, &c, &c).unwrap();
    let (k17, _) = handshake(CipherSuite::Suite17, &c, &c).unwrap();
    let pkt = session::seal(&k3, PayloadType::IpmiMessage, 1, 1, b"x", [0; 16]).unwrap();
    assert!(session::open(&k17, &pkt).is_err());
    let pkt = session::seal(&k17, PayloadType::IpmiMessage, 1, 1, b"x", [0; 16]).unwrap();
    assert!(session::open(&k3, &pkt).is_err());
}
