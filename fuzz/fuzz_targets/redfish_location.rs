//! A redirect's Location header from a BMC.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| nodefence::fuzzing::redfish_location(data));
