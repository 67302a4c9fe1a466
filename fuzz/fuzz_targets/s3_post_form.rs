//! The first bytes of a browser POST Object upload (`multipart/form-data`), as the server reads the form's
//! fields and checks its policy before s3s sees the body: never a panic; the fields' spans lie inside the
//! body and cutting the signature out of it stays inside it. The boundary is the input's first line.
#![no_main]
use libfuzzer_sys::fuzz_target;
use permafrost_s3::fuzzing;

fuzz_target!(|data: &[u8]| {
    let at = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let boundary = String::from_utf8_lossy(&data[..at]);
    if boundary.is_empty() || boundary.len() > 70 {
        return;
    }
    let body = data.get(at + 1..).unwrap_or(&[]);
    let _ = fuzzing::post_form(body, &boundary, "bucket", 1_780_000_000_000);
});
