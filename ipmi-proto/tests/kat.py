#!/usr/bin/env python3
"""Independent known-answer generator for tests/kat.rs.

Uses only Python's hmac/hashlib and the `cryptography` package (AES-CBC), not the
Rust crate. Run: python3 ipmi-proto/tests/kat.py  (needs `cryptography`).
Conventions follow ipmitool's lanplus_crypt.c: K1/K2 = HMAC(SIK, 0x01*20 / 0x02*20)
for both SHA-1 and SHA-256.
"""
import hashlib
import hmac
import struct

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

USER = b"admin"
PASSWORD = b"password"
KG = b"0123456789abcdefghij"  # 20 bytes
SIDM = 0x11223344  # console session id
SIDC = 0xA1B2C3D4  # BMC session id
RM = bytes(range(0x00, 0x10))
RC = bytes(range(0x10, 0x20))
GUID = bytes(range(0x20, 0x30))
ROLE = 0x14  # ADMINISTRATOR | name-only lookup
IV = bytes(range(0xA0, 0xB0))
PLAIN = bytes.fromhex("2018c881043b04bd")  # an IPMI message: Set Session Privilege
SEQ = 7
ICV_LEN = {"sha1": 12, "sha256": 16}


def h(alg, key, *parts):
    return hmac.new(key, b"".join(parts), getattr(hashlib, alg)).digest()


def le32(v):
    return struct.pack("<I", v)


def aes_cbc(key, iv, data):
    pad = (16 - (len(data) + 1) % 16) % 16
    data = data + bytes(range(1, pad + 1)) + bytes([pad])
    enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    return iv + enc.update(data) + enc.finalize()


def suite(alg, kg):
    ul = bytes([len(USER)])
    rakp2 = h(alg, PASSWORD, le32(SIDM), le32(SIDC), RM, RC, GUID, bytes([ROLE]), ul, USER)
    rakp3 = h(alg, PASSWORD, RC, le32(SIDM), bytes([ROLE]), ul, USER)
    sik = h(alg, kg or PASSWORD, RM, RC, bytes([ROLE]), ul, USER)
    k1 = h(alg, sik, b"\x01" * 20)
    k2 = h(alg, sik, b"\x02" * 20)
    rakp4 = h(alg, sik, RM, le32(SIDC), GUID)[: ICV_LEN[alg]]
    payload = aes_cbc(k2[:16], IV, PLAIN)
    # sealed session packet: RMCP ‖ auth type 6 ‖ payload type 0xC0 ‖ SID ‖ seq ‖ len
    sess = bytes([0x06, 0xC0]) + le32(SIDC) + le32(SEQ) + struct.pack("<H", len(payload))
    sess += payload
    pad = (4 - (len(sess) + 2) % 4) % 4
    sess += b"\xff" * pad + bytes([pad, 0x07])
    packet = bytes([0x06, 0x00, 0xFF, 0x07]) + sess + h(alg, k1, sess)[: ICV_LEN[alg]]
    return dict(rakp2=rakp2, rakp3=rakp3, sik=sik, k1=k1, k2=k2, rakp4=rakp4,
                payload=payload, packet=packet)


for name, alg, kg in [("S3", "sha1", None), ("S17", "sha256", None), ("S17_KG", "sha256", KG)]:
    for k, v in suite(alg, kg).items():
        print(f'const {name}_{k.upper()}: &str = "{v.hex()}";')
