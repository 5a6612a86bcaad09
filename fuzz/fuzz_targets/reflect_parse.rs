//! The fuzz target for `checks/reflect_parse.rs` (what an input is, and what it
//! must keep to, is told there).

#![no_main]

#[path = "../checks/reflect_parse.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
