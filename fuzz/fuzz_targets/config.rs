//! nodefence.toml and inventory.toml (split at the first NUL) through the real loader.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (agent, inventory) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&b"inventory = \"inventory.toml\"\n"[..], data),
    };
    nodefence::fuzzing::config(agent, inventory);
});
