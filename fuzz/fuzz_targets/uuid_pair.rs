//! Two UUID strings (split at the first NUL) as a node and its BMC report them.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(i) = data.iter().position(|b| *b == 0)
        && let (Ok(a), Ok(b)) = (
            std::str::from_utf8(&data[..i]),
            std::str::from_utf8(&data[i + 1..]),
        )
    {
        nodefence::fuzzing::uuid_pair(a, b);
    }
});
