//! Every truncated, corrupted or random input is an `Err`, never a panic; the spec's
//! length limits are enforced with specific errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nodefence_ipmi_proto::command::{self, Privilege};
use nodefence_ipmi_proto::crypto::{
    Algorithms, CipherSuite, Credentials, RakpContext, SessionKeys,
};
use nodefence_ipmi_proto::message::{self, IpmiMessage};
use nodefence_ipmi_proto::rakp::{
    OpenSessionAccepted, OpenSessionRequest, OpenSessionResponse, Rakp1, Rakp2, Rakp2Accepted,
    Rakp3, Rakp4,
};
use nodefence_ipmi_proto::rmcp::{self, Packet, PayloadType, V2Header};
use nodefence_ipmi_proto::{Error, Result, cipher, session};

fn keys(suite: CipherSuite) -> SessionKeys {
    let ctx = RakpContext {
        suite,
        console_session_id: 1,
        bmc_session_id: 2,
        console_random: [3; 16],
        bmc_random: [4; 16],
        bmc_guid: [5; 16],
        role: 4,
    };
    ctx.session_keys(&Credentials::new(b"admin", b"password", None).unwrap())
}

/// Fully decodes a datagram the way a peer in `suite` would: framing, then the body
/// for its payload type (opening sealed packets with `keys`).
fn decode_any(suite: CipherSuite, keys: &SessionKeys, d: &[u8]) -> Result<()> {
    match rmcp::split(d)? {
        Packet::V15 { message, .. } => IpmiMessage::decode(message).map(drop),
        Packet::V2 {
            header, payload, ..
        } => {
            if header.authenticated || header.encrypted {
                let o = session::open(keys, d)?;
                return IpmiMessage::decode(&o.payload).map(drop);
            }
            match header.payload_type {
                PayloadType::IpmiMessage => IpmiMessage::decode(payload).map(drop),
                PayloadType::OpenSessionRequest => OpenSessionRequest::decode(payload).map(drop),
                PayloadType::OpenSessionResponse => OpenSessionResponse::decode(payload).map(drop),
                PayloadType::Rakp1 => Rakp1::decode(payload).map(drop),
                PayloadType::Rakp2 => Rakp2::decode(payload, suite).map(drop),
                PayloadType::Rakp3 => Rakp3::decode(payload, suite).map(drop),
                PayloadType::Rakp4 => Rakp4::decode(payload, suite).map(drop),
            }
        }
    }
}

fn valid_packets(suite: CipherSuite, keys: &SessionKeys) -> Vec<Vec<u8>> {
    let algs = suite.algorithms();
    let plain = |t, b: Vec<u8>| rmcp::encode_v2_plain(&V2Header::pre_session(t), &b).unwrap();
    let msg = command::get_channel_auth_capabilities(3, Privilege::Administrator)
        .encode()
        .unwrap();
    vec![
        rmcp::encode_v15(0, 0, &msg).unwrap(),
        plain(
            PayloadType::OpenSessionRequest,
            OpenSessionRequest {
                tag: 1,
                max_privilege: 4,
                console_session_id: 9,
                algorithms: algs,
            }
            .encode(),
        ),
        plain(
            PayloadType::OpenSessionResponse,
            OpenSessionResponse {
                tag: 1,
                status: 0,
                max_privilege: 4,
                console_session_id: 9,
                accepted: Some(OpenSessionAccepted {
                    bmc_session_id: 10,
                    algorithms: algs,
                }),
            }
            .encode(),
        ),
        plain(
            PayloadType::Rakp1,
            Rakp1 {
                tag: 2,
                bmc_session_id: 10,
                console_random: [7; 16],
                role: 0x14,
                username: b"admin".to_vec(),
            }
            .encode()
            .unwrap(),
        ),
        plain(
            PayloadType::Rakp2,
            Rakp2 {
                tag: 2,
                status: 0,
                console_session_id: 9,
                accepted: Some(Rakp2Accepted {
                    bmc_random: [8; 16],
                    bmc_guid: [9; 16],
                    auth_code: vec![0xAB; suite.rakp_auth_len()],
                }),
            }
            .encode(suite)
            .unwrap(),
        ),
        plain(
            PayloadType::Rakp3,
            Rakp3 {
                tag: 3,
                status: 0,
                bmc_session_id: 10,
                auth_code: vec![0xCD; suite.rakp_auth_len()],
            }
            .encode(suite)
            .unwrap(),
        ),
        plain(
            PayloadType::Rakp4,
            Rakp4 {
                tag: 3,
                status: 0,
                console_session_id: 9,
                icv: vec![0xEF; suite.rakp4_icv_len()],
            }
            .encode(suite)
            .unwrap(),
        ),
        // Sealed packets with payloads of every length around the pad boundaries.
        session::seal(keys, PayloadType::IpmiMessage, 10, 1, &msg, [1; 16]).unwrap(),
        session::seal(
            keys,
            PayloadType::IpmiMessage,
            10,
            2,
            &[msg.clone(), vec![0; 8]].concat(),
            [2; 16],
        )
        .unwrap(),
    ]
}

#[test]
fn every_truncation_is_an_error() {
    for suite in [CipherSuite::Suite3, CipherSuite::Suite17] {
        let k = keys(suite);
        for pkt in valid_packets(suite, &k) {
            decode_any(suite, &k, &pkt).unwrap();
            for len in 0..pkt.len() {
                assert!(
                    decode_any(suite, &k, &pkt[..len]).is_err(),
                    "{suite:?}: prefix {len} of {pkt:02x?} decoded"
                );
            }
            // One extra byte is also an error.
            let mut longer = pkt.clone();
            longer.push(0);
            assert!(
                decode_any(suite, &k, &longer).is_err(),
                "{suite:?}: {longer:02x?}"
            );
        }
    }
}

#[test]
fn every_byte_flip_of_a_sealed_packet_is_rejected() {
    for suite in [CipherSuite::Suite3, CipherSuite::Suite17] {
        let k = keys(suite);
        let pkt = session::seal(&k, PayloadType::IpmiMessage, 10, 1, b"hello", [9; 16]).unwrap();
        for i in 0..pkt.len() {
            for bit in 0..8 {
                let mut bad = pkt.clone();
                bad[i] ^= 1 << bit;
                assert!(
                    session::open(&k, &bad).is_err(),
                    "{suite:?}: flip {i}/{bit}"
                );
            }
        }
    }
}

/// xorshift64*, so the test needs no RNG dependency and is reproducible.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let k3 = keys(CipherSuite::Suite3);
    let k17 = keys(CipherSuite::Suite17);
    for i in 0..20_000 {
        let len = (rng.next() % 128) as usize;
        let mut d = rng.bytes(len);
        // Make most inputs get past the RMCP header to exercise deeper decoders.
        if i % 4 != 0 && d.len() >= 6 {
            d[..4].copy_from_slice(&rmcp::RMCP_HEADER);
            d[4] = if i % 2 == 0 { 0x06 } else { 0x00 };
            if i % 8 == 1 {
                d[5] = [0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0xC0][(rng.next() % 8) as usize];
            }
            if d.len() >= 16 {
                let plen = d.len().saturating_sub(16 + (rng.next() % 20) as usize) as u16;
                d[14..16].copy_from_slice(&plen.to_le_bytes());
            }
        }
        for (suite, k) in [(CipherSuite::Suite3, &k3), (CipherSuite::Suite17, &k17)] {
            let _ = decode_any(suite, k, &d);
            let _ = session::open(k, &d);
            let _ = cipher::decrypt(k.k2(), &d);
            let _ = Rakp2::decode(&d, suite);
            let _ = Rakp3::decode(&d, suite);
            let _ = Rakp4::decode(&d, suite);
        }
        let _ = IpmiMessage::decode(&d);
        let _ = OpenSessionRequest::decode(&d);
        let _ = OpenSessionResponse::decode(&d);
        let _ = Rakp1::decode(&d);
    }
}

#[test]
fn length_limits_are_enforced() {
    assert_eq!(
        Credentials::new(&[b'u'; 17], b"pw", None)
            .err()
            .map(|e| e.to_string()),
        Some("IPMI user name is 17 bytes, at most 16 allowed".to_owned())
    );
    assert!(matches!(
        Credentials::new(b"u", &[b'p'; 21], None),
        Err(Error::PasswordTooLong(21))
    ));
    assert!(matches!(
        Credentials::new(b"u", b"p", Some(&[1; 21])),
        Err(Error::KgTooLong(21))
    ));
    assert!(Credentials::new(&[b'u'; 16], &[b'p'; 20], Some(&[1; 20])).is_ok());
    let r1 = Rakp1 {
        tag: 0,
        bmc_session_id: 0,
        console_random: [0; 16],
        role: 4,
        username: vec![b'u'; 17],
    };
    assert_eq!(r1.encode(), Err(Error::UsernameTooLong(17)));
    // A RAKP 1 on the wire claiming a 17-byte name.
    let mut wire = Rakp1 {
        username: vec![b'u'; 16],
        ..r1
    }
    .encode()
    .unwrap();
    wire[27] = 17;
    wire.push(b'u');
    assert_eq!(Rakp1::decode(&wire), Err(Error::UsernameTooLong(17)));
    // Wrong-length auth codes are refused on encode.
    let r3 = Rakp3 {
        tag: 0,
        status: 0,
        bmc_session_id: 0,
        auth_code: vec![0; 20],
    };
    assert!(r3.encode(CipherSuite::Suite17).is_err());
    assert!(r3.encode(CipherSuite::Suite3).is_ok());
}

#[test]
fn message_checksums_and_fields() {
    let good = command::get_channel_auth_capabilities(1, Privilege::Administrator)
        .encode()
        .unwrap();
    for i in 0..good.len() {
        let mut bad = good.clone();
        bad[i] = bad[i].wrapping_add(1);
        let err = IpmiMessage::decode(&bad).unwrap_err();
        let want = if i < 3 { 1 } else { 2 };
        assert_eq!(err, Error::BadChecksum(want), "byte {i}");
    }
    let mut m = IpmiMessage::decode(&good).unwrap();
    m.seq = 64;
    assert!(matches!(m.encode(), Err(Error::FieldOutOfRange { .. })));
    m.seq = 63;
    m.net_fn = 0x40;
    assert!(matches!(m.encode(), Err(Error::FieldOutOfRange { .. })));
    assert_eq!(message::checksum(&[0x20, 0x18]), 0xC8);
    assert_eq!(message::checksum(&[]), 0);
}

#[test]
fn framing_rejections() {
    let k = keys(CipherSuite::Suite3);
    // Not RMCP / not IPMI class / unsupported auth type / unknown payload type.
    assert!(matches!(
        rmcp::split(&[0x06, 0, 0xFF, 0x06, 0]),
        Err(Error::BadRmcpHeader(_))
    ));
    assert_eq!(
        rmcp::split(&[0x06, 0, 0xFF, 0x07, 0x02]),
        Err(Error::UnsupportedAuthType(2))
    );
    let mut oem = rmcp::encode_v2_plain(&V2Header::pre_session(PayloadType::Rakp1), &[]).unwrap();
    oem[5] = 0x02;
    assert_eq!(rmcp::split(&oem), Err(Error::UnsupportedPayloadType(2)));
    // An unauthenticated packet is refused by session::open.
    let plain =
        rmcp::encode_v2_plain(&V2Header::pre_session(PayloadType::IpmiMessage), b"x").unwrap();
    assert_eq!(
        session::open(&k, &plain),
        Err(Error::NotProtected("authenticated"))
    );
    // Plain encoding refuses protected headers.
    let mut h = V2Header::pre_session(PayloadType::IpmiMessage);
    h.authenticated = true;
    assert!(rmcp::encode_v2_plain(&h, b"x").is_err());
    // Too long for the length fields.
    assert!(rmcp::encode_v15(0, 0, &[0; 256]).is_err());
    assert!(
        rmcp::encode_v2_plain(
            &V2Header::pre_session(PayloadType::IpmiMessage),
            &[0; 65536]
        )
        .is_err()
    );
    // Unsupported algorithm combinations.
    let a = Algorithms {
        auth: 1,
        integrity: 4,
        confidentiality: 1,
    };
    assert!(matches!(
        CipherSuite::from_algorithms(a),
        Err(Error::UnsupportedCipherSuite { .. })
    ));
    // Error-status responses may be short and decode without the optional part.
    let short = OpenSessionResponse::decode(&[1, 0x12, 0, 0, 9, 0, 0, 0]).unwrap();
    assert_eq!((short.status, short.accepted), (0x12, None));
    let r2 = Rakp2::decode(&[2, 0x0D, 0, 0, 9, 0, 0, 0], CipherSuite::Suite17).unwrap();
    assert_eq!((r2.status, r2.accepted), (0x0D, None));
}

#[test]
fn confidentiality_pad_boundaries() {
    let k = keys(CipherSuite::Suite17);
    for len in 0..=48usize {
        let data: Vec<u8> = (0..len as u8).collect();
        let enc = cipher::encrypt(k.k2(), [len as u8; 16], &data).unwrap();
        assert_eq!(enc.len() % 16, 0);
        assert_eq!(enc.len(), 16 + (len + 1).div_ceil(16) * 16);
        assert_eq!(cipher::decrypt(k.k2(), &enc).unwrap(), data);
        let sealed = session::seal(&k, PayloadType::IpmiMessage, 1, 1, &data, [3; 16]).unwrap();
        assert_eq!((sealed.len() - 4 - k.suite().integrity_len()) % 4, 0);
        assert_eq!(session::open(&k, &sealed).unwrap().payload, data);
    }
    assert!(cipher::decrypt(&[0; 15], &[0; 32]).is_err());
    assert!(cipher::decrypt(k.k2(), &[0; 16]).is_err());
    assert!(cipher::decrypt(k.k2(), &[0; 33]).is_err());
}
