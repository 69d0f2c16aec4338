//! An IPMI/RMCP+ datagram from a BMC: framing, an authenticated session's integrity
//! check and decryption, RAKP replies, and the command replies nodefence decodes.
#![no_main]
use nodefence_ipmi_proto::{command, crypto, message, rakp, rmcp, session};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = rmcp::split(data);
    let _ = message::IpmiMessage::decode(data);
    let _ = rakp::OpenSessionResponse::decode(data);
    for suite in [crypto::CipherSuite::Suite3, crypto::CipherSuite::Suite17] {
        let _ = rakp::Rakp2::decode(data, suite);
        let _ = rakp::Rakp4::decode(data, suite);
        let Ok(creds) = crypto::Credentials::new(b"admin", b"password", None) else {
            continue;
        };
        let ctx = crypto::RakpContext {
            suite,
            console_session_id: 0x0a0b_0c0d,
            bmc_session_id: 0x0102_0304,
            console_random: [7; 16],
            bmc_random: [9; 16],
            bmc_guid: [3; 16],
            role: 0x14,
        };
        let keys = ctx.session_keys(&creds);
        let _ = session::open(&keys, data);
    }
    let _ = command::ChannelAuthCapabilities::decode(data);
    let _ = command::ChassisStatus::decode(data);
    let _ = command::decode_system_guid(data);
    let _ = command::decode_session_privilege(data);
    let _ = command::decode_close_session(data);
    let _ = command::split_completion(data);
    if let Ok((_, records)) = command::decode_cipher_suites_chunk(data) {
        let _ = command::parse_cipher_suite_records(records);
    }
});
