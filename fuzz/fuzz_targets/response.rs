#![no_main]
//! Fuzzes `targets::response`; see fuzz/targets.rs for what it asserts.

#[allow(dead_code)]
#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::response(data));
