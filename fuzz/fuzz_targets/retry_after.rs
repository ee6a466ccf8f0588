#![no_main]
//! Fuzzes `targets::retry_after`; see fuzz/targets.rs for what it asserts.

#[allow(dead_code)]
#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::retry_after(data));
