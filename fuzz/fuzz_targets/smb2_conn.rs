#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| duet_fuzz::smb2_conn(data));
