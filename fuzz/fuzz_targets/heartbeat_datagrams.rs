//! The heartbeat's datagrams, to the leader's table of companions and to a
//! companion's end of its session alike: as they come, sealed under the session's key
//! whatever their body, and the two ends' own beats and acknowledgements replayed.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = nodefence::fuzzing::heartbeat_datagrams(data);
});
