//! The API server's review of a companion's token (a TokenReview status, JSON): the
//! node it binds, if any, and what a refusal says.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = nodefence::fuzzing::token_review(data);
});
