#![no_main]
//! cargo-fuzz entry for `fleet_fuzz::pane_text` (see `scripts/fuzz.sh`).
libfuzzer_sys::fuzz_target!(|data: &[u8]| fleet_fuzz::pane_text(data));
