#![no_main]
//! Fuzzes `targets::config`; see fuzz/targets.rs for what it asserts.

#[allow(dead_code)]
#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::config(data));
