//! IPMI messages carried in a session payload: addresses, netFn/LUN, sequence, command,
//! data, and the two two's-complement checksums.

use crate::wire::Reader;
use crate::{Error, Result};

/// BMC slave address (responder in requests).
pub const BMC_ADDR: u8 = 0x20;
/// Remote console software id (requester in requests).
pub const CONSOLE_ADDR: u8 = 0x81;
/// Network function "Application" (requests; responses use `+ 1`).
pub const NETFN_APP: u8 = 0x06;
/// Network function "Chassis".
pub const NETFN_CHASSIS: u8 = 0x00;

/// One IPMI message. For a request `dst` is the responder (rsAddr/rsLUN) and `src` the
/// requester (rqAddr/rqLUN); for a response they are swapped, exactly as on the wire.
/// For responses the completion code is the first byte of `data`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpmiMessage {
    /// First address byte (rsAddr in a request, rqAddr in a response).
    pub dst_addr: u8,
    /// Network function, 6 bits (odd for responses).
    pub net_fn: u8,
    /// LUN paired with `dst_addr`, 2 bits.
    pub dst_lun: u8,
    /// Second address byte (rqAddr in a request, rsAddr in a response).
    pub src_addr: u8,
    /// Requester sequence number, 6 bits.
    pub seq: u8,
    /// LUN paired with `src_addr`, 2 bits.
    pub src_lun: u8,
    /// Command.
    pub cmd: u8,
    /// Request data, or completion code followed by response data.
    pub data: Vec<u8>,
}

/// Two's-complement checksum: the byte that makes `bytes` sum to zero (mod 256).
pub fn checksum(bytes: &[u8]) -> u8 {
    0u8.wrapping_sub(bytes.iter().fold(0u8, |a, &b| a.wrapping_add(b)))
}

fn check_bits(what: &'static str, value: u8, bits: u32) -> Result<()> {
    if u32::from(value) >> bits == 0 {
        Ok(())
    } else {
        Err(Error::FieldOutOfRange {
            what,
            value: u32::from(value),
        })
    }
}

impl IpmiMessage {
    /// A request from the remote console (0x81, LUN 0) to the BMC (0x20, LUN 0).
    pub fn request(net_fn: u8, cmd: u8, seq: u8, data: Vec<u8>) -> Self {
        Self {
            dst_addr: BMC_ADDR,
            net_fn,
            dst_lun: 0,
            src_addr: CONSOLE_ADDR,
            seq,
            src_lun: 0,
            cmd,
            data,
        }
    }

    /// The response to this request: addresses swapped, netFn + 1, same sequence and
    /// command, data = completion code then `data`.
    pub fn response(&self, completion_code: u8, data: &[u8]) -> Self {
        let mut body = Vec::with_capacity(1 + data.len());
        body.push(completion_code);
        body.extend_from_slice(data);
        Self {
            dst_addr: self.src_addr,
            net_fn: self.net_fn | 1,
            dst_lun: self.src_lun,
            src_addr: self.dst_addr,
            seq: self.seq,
            src_lun: self.dst_lun,
            cmd: self.cmd,
            data: body,
        }
    }

    /// Encodes the message with both checksums.
    pub fn encode(&self) -> Result<Vec<u8>> {
        check_bits("netFn", self.net_fn, 6)?;
        check_bits("LUN", self.dst_lun, 2)?;
        check_bits("LUN", self.src_lun, 2)?;
        check_bits("rqSeq", self.seq, 6)?;
        let mut out = Vec::with_capacity(7 + self.data.len());
        out.push(self.dst_addr);
        out.push(self.net_fn << 2 | self.dst_lun);
        out.push(checksum(&out));
        out.push(self.src_addr);
        out.push(self.seq << 2 | self.src_lun);
        out.push(self.cmd);
        out.extend_from_slice(&self.data);
        out.push(checksum(out.get(3..).unwrap_or_default()));
        Ok(out)
    }

    /// Decodes a message, verifying both checksums.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes, "IPMI message");
        let head: [u8; 3] = r.array()?;
        if checksum(&head) != 0 {
            return Err(Error::BadChecksum(1));
        }
        let src_addr = r.u8()?;
        let seq_lun = r.u8()?;
        let cmd = r.u8()?;
        let rest = r.rest();
        let Some((&_ck2, data)) = rest.split_last() else {
            return Err(Error::Truncated {
                what: "IPMI message",
                need: 7,
                got: bytes.len(),
            });
        };
        if checksum(bytes.get(3..).unwrap_or_default()) != 0 {
            return Err(Error::BadChecksum(2));
        }
        Ok(Self {
            dst_addr: head[0],
            net_fn: head[1] >> 2,
            dst_lun: head[1] & 3,
            src_addr,
            seq: seq_lun >> 2,
            src_lun: seq_lun & 3,
            cmd,
            data: data.to_vec(),
        })
    }
}
