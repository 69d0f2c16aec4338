//! The fake BMC inside an established session: answering requests, and forging the
//! replies claiming Off that the driver must discard.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;

use nodefence_ipmi_proto::command;
use nodefence_ipmi_proto::crypto::SessionKeys;
use nodefence_ipmi_proto::message::{IpmiMessage, NETFN_APP, NETFN_CHASSIS};
use nodefence_ipmi_proto::rmcp::{self, PayloadType, V2Header};
use nodefence_ipmi_proto::{seq, session};

use super::{Behaviour, Record};

pub(super) struct Active {
    pub keys: SessionKeys,
    pub console_sid: u32,
    pub bmc_sid: u32,
    pub out: seq::Outbound,
    pub last_seq: u32,
    pub last_datagram: Vec<u8>,
}

impl Active {
    fn seal_as(&self, t: PayloadType, sid: u32, seq: u32, body: &[u8]) -> Vec<u8> {
        session::seal(&self.keys, t, sid, seq, body, [0x5C; 16]).unwrap()
    }

    /// A fresh, authentic reply packet.
    fn reply(&mut self, msg: &IpmiMessage) -> Vec<u8> {
        let seq = self.out.next_seq();
        self.last_seq = seq;
        let d = self.seal_as(
            PayloadType::IpmiMessage,
            self.console_sid,
            seq,
            &msg.encode().unwrap(),
        );
        self.last_datagram = d.clone();
        d
    }

    /// Replies to `req` claiming the power is off, each unacceptable in one way.
    fn forgeries(&mut self, req: &IpmiMessage) -> Vec<Vec<u8>> {
        let off = req.response(0, &[0x00, 0x00, 0x00]);
        let body = off.encode().unwrap();
        let sid = self.console_sid;
        let mut out = vec![
            b"\x00\x01 not RMCP at all".to_vec(),
            rmcp::encode_v15(0, 0, &body).unwrap(),
            rmcp::encode_v2_plain(
                &V2Header {
                    payload_type: PayloadType::IpmiMessage,
                    encrypted: false,
                    authenticated: false,
                    session_id: sid,
                    session_seq: 1000,
                },
                &body,
            )
            .unwrap(),
        ];
        let replayed = self.last_datagram.clone();
        out.push(replayed);
        let seq = self.last_seq;
        out.push(self.seal_as(PayloadType::IpmiMessage, sid, seq, &body));
        let fresh = self.out.next_seq();
        out.push(self.seal_as(PayloadType::IpmiMessage, sid ^ 1, fresh, &body));
        let s = self.out.next_seq();
        let mut tampered = self.seal_as(PayloadType::IpmiMessage, sid, s, &body);
        *tampered.last_mut().unwrap() ^= 1;
        out.push(tampered.clone());
        out.push(tampered[..12].to_vec());
        let mut other_seq = off.clone();
        other_seq.seq = (off.seq + 1) & 0x3F;
        let mut other_cmd = off.clone();
        other_cmd.cmd = command::CMD_CHASSIS_CONTROL;
        let mut other_addr = off.clone();
        other_addr.dst_addr = 0x83;
        for m in [other_seq, other_cmd, other_addr] {
            let s = self.out.next_seq();
            out.push(self.seal_as(PayloadType::IpmiMessage, sid, s, &m.encode().unwrap()));
        }
        let mut bad_sum = body.clone();
        *bad_sum.last_mut().unwrap() ^= 0xFF;
        let s = self.out.next_seq();
        out.push(self.seal_as(PayloadType::IpmiMessage, sid, s, &bad_sum));
        let s = self.out.next_seq();
        out.push(self.seal_as(PayloadType::Rakp2, sid, s, &body));
        let s = self.out.next_seq();
        out.push(self.seal_as(PayloadType::IpmiMessage, sid, s.wrapping_add(100), &body));
        out
    }
}

pub(super) fn in_session(
    b: &Behaviour,
    a: &mut Active,
    datagram: &[u8],
    behaviour: &Mutex<Behaviour>,
    record: &Mutex<Record>,
) -> Vec<Vec<u8>> {
    let Ok(opened) = session::open(&a.keys, datagram) else {
        return Vec::new();
    };
    if opened.session_id != a.bmc_sid {
        return Vec::new();
    }
    let Ok(req) = IpmiMessage::decode(&opened.payload) else {
        return Vec::new();
    };
    record
        .lock()
        .unwrap()
        .requests
        .push((req.net_fn, req.cmd, req.seq, a.bmc_sid));
    if b.ignore.contains(&(req.net_fn, req.cmd)) {
        return Vec::new();
    }
    let resp = match (req.net_fn, req.cmd) {
        (NETFN_APP, command::CMD_SET_SESSION_PRIVILEGE) => req.response(b.privilege_cc, &req.data),
        (NETFN_APP, command::CMD_CLOSE_SESSION) => {
            record.lock().unwrap().closes += 1;
            req.response(0, &[])
        }
        (NETFN_APP, command::CMD_GET_SYSTEM_GUID) => req.response(0, &b.guid),
        (NETFN_CHASSIS, command::CMD_GET_CHASSIS_STATUS) => {
            let mut out = if b.forge || b.forge_only {
                a.forgeries(&req)
            } else {
                Vec::new()
            };
            if !b.forge_only {
                let status = req.response(0, &[u8::from(b.power_on), 0, 0]);
                out.push(a.reply(&status));
            }
            return out;
        }
        (NETFN_CHASSIS, command::CMD_CHASSIS_CONTROL) => {
            if b.control_cc == 0 {
                match req.data.first() {
                    Some(0) => behaviour.lock().unwrap().power_on = false,
                    Some(1) => behaviour.lock().unwrap().power_on = true,
                    _ => {}
                }
            }
            req.response(b.control_cc, &[])
        }
        _ => req.response(command::CC_INVALID_COMMAND, &[]),
    };
    vec![a.reply(&resp)]
}
