#![no_main]
//! cargo-fuzz entry for `fleet_fuzz::report` (see `scripts/fuzz.sh`).
libfuzzer_sys::fuzz_target!(|data: &[u8]| fleet_fuzz::report(data));
