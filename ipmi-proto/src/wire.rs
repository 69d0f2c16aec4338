//! Bounds-checked little-endian reader used by every decoder.

use crate::{Error, Result};

pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Self { buf, pos: 0, what }
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end.and_then(|e| self.buf.get(self.pos..e).map(|s| (e, s))) {
            Some((e, s)) => {
                self.pos = e;
                Ok(s)
            }
            None => Err(Error::Truncated {
                what: self.what,
                need: self.pos.saturating_add(n),
                got: self.buf.len(),
            }),
        }
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u16_le(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub(crate) fn u32_le(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let r = self.buf.get(self.pos..).unwrap_or_default();
        self.pos = self.buf.len();
        r
    }

    pub(crate) fn finish(self) -> Result<()> {
        let extra = self.buf.len().saturating_sub(self.pos);
        if extra == 0 {
            Ok(())
        } else {
            Err(Error::TrailingBytes {
                what: self.what,
                extra,
            })
        }
    }
}
