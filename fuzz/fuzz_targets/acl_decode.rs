#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| duet_fuzz::acl_decode(data));
