//! What a fence agent printed; the first byte is its exit code.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some((code, output)) = data.split_first() {
        nodefence::fuzzing::fence_agent_output(output, i32::from(*code));
    }
});
