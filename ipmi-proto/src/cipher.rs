//! Confidentiality algorithm AES-CBC-128: payload = IV (16 bytes, chosen by the
//! caller) ‖ AES-CBC(K2[..16], IV, data ‖ pad 1,2,3,… ‖ pad length).

use aes::Aes128;
use aes::cipher::{BlockModeDecrypt, BlockModeEncrypt, KeyIvInit};
use zeroize::Zeroizing;

use crate::{Error, Result};

/// AES block (and IV) size.
pub const BLOCK: usize = 16;

fn key(k2: &[u8]) -> Result<Zeroizing<[u8; 16]>> {
    let mut k = Zeroizing::new([0u8; 16]);
    k.copy_from_slice(k2.get(..16).ok_or(Error::BadLength {
        what: "K2",
        len: k2.len(),
    })?);
    Ok(k)
}

/// Encrypts `plain` with the IPMI confidentiality pad. `k2` is the session's K2 (only
/// its first 16 bytes are used); `iv` must be fresh random bytes from the caller.
pub fn encrypt(k2: &[u8], iv: [u8; BLOCK], plain: &[u8]) -> Result<Vec<u8>> {
    let key = key(k2)?;
    let pad_len = (BLOCK - (plain.len() + 1) % BLOCK) % BLOCK;
    let mut buf = Zeroizing::new(Vec::with_capacity(plain.len() + pad_len + 1));
    buf.extend_from_slice(plain);
    // pad_len < 16, so these casts cannot truncate.
    buf.extend((1..=pad_len).map(|i| i as u8));
    buf.push(pad_len as u8);
    let mut enc = cbc::Encryptor::<Aes128>::new(&(*key).into(), &iv.into());
    for chunk in buf.chunks_exact_mut(BLOCK) {
        let block: &mut aes::Block = chunk.try_into().map_err(|_| Error::BadLength {
            what: "AES block",
            len: BLOCK,
        })?;
        enc.encrypt_block(block);
    }
    let mut out = Vec::with_capacity(BLOCK + buf.len());
    out.extend_from_slice(&iv);
    out.extend_from_slice(&buf);
    Ok(out)
}

/// Decrypts an AES-CBC-128 payload (IV ‖ ciphertext) and strips and checks the pad.
/// Call only after the packet's AuthCode verified.
pub fn decrypt(k2: &[u8], payload: &[u8]) -> Result<Vec<u8>> {
    let key = key(k2)?;
    if payload.len() < 2 * BLOCK || !payload.len().is_multiple_of(BLOCK) {
        return Err(Error::BadLength {
            what: "AES-CBC-128 payload",
            len: payload.len(),
        });
    }
    let (iv, ct) = payload.split_at(BLOCK);
    let mut iv_arr = [0u8; BLOCK];
    iv_arr.copy_from_slice(iv);
    let mut buf = Zeroizing::new(ct.to_vec());
    let mut dec = cbc::Decryptor::<Aes128>::new(&(*key).into(), &iv_arr.into());
    for chunk in buf.chunks_exact_mut(BLOCK) {
        let block: &mut aes::Block = chunk.try_into().map_err(|_| Error::BadLength {
            what: "AES block",
            len: BLOCK,
        })?;
        dec.decrypt_block(block);
    }
    let (&pad_len, body) = buf.split_last().ok_or(Error::BadPad("confidentiality"))?;
    let pad_len = usize::from(pad_len);
    if pad_len >= BLOCK || pad_len > body.len() {
        return Err(Error::BadPad("confidentiality"));
    }
    let (data, pad) = body.split_at(body.len() - pad_len);
    if pad.iter().zip(1u8..).any(|(&p, i)| p != i) {
        return Err(Error::BadPad("confidentiality"));
    }
    Ok(data.to_vec())
}
