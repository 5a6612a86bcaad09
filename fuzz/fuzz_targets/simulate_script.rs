//! The fuzz target for `checks/simulate_script.rs` (what an input is, and what it
//! must keep to, is told there).

#![no_main]

#[path = "../checks/simulate_script.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
