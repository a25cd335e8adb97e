#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| duet_fuzz::nfs4_callback(data));
