//! A Redfish reply body (service root, system, collection, task, ActionInfo, error).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| nodefence::fuzzing::redfish_body(data));
