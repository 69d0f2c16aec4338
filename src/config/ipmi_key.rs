//! The IPMI BMC key (K_g), from `kg_file` or `kg_env`.
//!
//! A BMC with a K_g set keys every session with it instead of the user's password, so a
//! console without it cannot log in. The key is written as text (at most 20 bytes, as
//! `ipmitool -k`) or as `0x` followed by up to 40 hex digits (as `ipmitool -y`). Like a
//! password, it is never shown: messages name the setting, not the value.

use secrecy::ExposeSecret;

use super::files;
use super::layer::KeyRef;
use super::model::IpmiKey;
use super::resolve::{Chain, Ctx};

/// The longest K_g IPMI v2.0 allows, in bytes.
const MAX_KG: usize = 20;

/// The node's K_g, if one is set. `Err` when a problem was reported.
pub(crate) fn ipmi_key(ctx: &mut Ctx<'_>, chain: &Chain<'_>) -> Result<Option<IpmiKey>, ()> {
    let Some(picked) = chain.pick(|l| &l.kg) else {
        return Ok(None);
    };
    let (layer, val) = (picked.layer, picked.val);
    let text = match &val.value {
        KeyRef::File(path) => files::read_secret_line(
            path,
            "kg_file",
            "the BMC key",
            "create it with the BMC key (K_g) on one line",
        )
        .map(|read| read.password)
        .map_err(|p| (p.message, p.help)),
        KeyRef::Env(name) => match (ctx.env)(name) {
            Some(v) if !v.trim_end_matches(['\r', '\n']).is_empty() => {
                Ok(v.trim_end_matches(['\r', '\n']).to_string().into())
            }
            Some(_) => Err((
                format!("environment variable {name} (kg_env) is empty"),
                None,
            )),
            None => Err((
                format!("environment variable {name} (kg_env) is not set"),
                Some(format!(
                    "set {name} to the BMC key in nodefence's environment, or use kg_file"
                )),
            )),
        },
    };
    let from = match &val.value {
        KeyRef::File(path) => format!("kg_file {}", path.display.display()),
        KeyRef::Env(name) => format!("environment variable {name} (kg_env)"),
    };
    let decoded = text.and_then(|t| {
        decode(t.expose_secret())
            .map_err(|m| (format!("{from}: {m}"), Some(FORMAT_HELP.to_string())))
    });
    match decoded {
        Ok(key) => Ok(Some(IpmiKey::new(key))),
        Err((message, help)) => {
            ctx.error(layer, &val.span, message, help);
            Err(())
        }
    }
}

const FORMAT_HELP: &str = "write the key as text (at most 20 bytes, like ipmitool -k) or as 0x and up to 40 hex digits (like ipmitool -y)";

/// Text or `0x`-hex to key bytes. Messages never contain the key.
fn decode(text: &str) -> Result<Vec<u8>, String> {
    let bytes = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => {
            if hex.len() % 2 != 0 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(
                    "the BMC key starts with 0x but is not an even number of hex digits".into(),
                );
            }
            (0..hex.len())
                .step_by(2)
                .map(|i| {
                    hex.get(i..i + 2)
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                        .ok_or_else(|| "the BMC key is not valid hex".to_string())
                })
                .collect::<Result<Vec<u8>, String>>()?
        }
        None => text.as_bytes().to_vec(),
    };
    if bytes.len() > MAX_KG {
        return Err(format!(
            "the BMC key is {} bytes; IPMI v2.0 allows at most {MAX_KG}",
            bytes.len()
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::decode;

    #[test]
    fn text_and_hex_keys() {
        assert_eq!(decode("secret").unwrap(), b"secret");
        assert_eq!(decode("0x00ff10").unwrap(), [0, 0xFF, 0x10]);
        assert_eq!(decode("0X0A").unwrap(), [0x0A]);
        assert!(decode("0x0").is_err());
        assert!(decode("0xzz").is_err());
        assert!(decode(&"k".repeat(21)).unwrap_err().contains("21 bytes"));
        assert!(decode(&format!("0x{}", "ab".repeat(21))).is_err());
        assert_eq!(decode(&format!("0x{}", "ab".repeat(20))).unwrap().len(), 20);
    }

    #[test]
    fn messages_never_contain_the_key() {
        for bad in ["0xsupersecretvalue", "a-very-long-secret-key-text-here"] {
            let message = decode(bad).unwrap_err();
            assert!(
                !message.contains(bad) && !message.contains("supersecret"),
                "{message}"
            );
        }
    }
}
