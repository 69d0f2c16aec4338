//! A Node (and a Lease) as JSON, into the engine's facts and the identity check.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| nodefence::fuzzing::kubernetes_objects(data));
