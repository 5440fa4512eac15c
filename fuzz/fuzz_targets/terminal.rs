#![no_main]
//! cargo-fuzz entry for `fleet_fuzz::terminal` (see `scripts/fuzz.sh`).
libfuzzer_sys::fuzz_target!(|data: &[u8]| fleet_fuzz::terminal(data));
