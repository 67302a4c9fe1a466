//! The server's own validation and conversion of configuration bodies after s3s parsed them: CORS rules
//! (validated, stored as JSON, matched against a preflight), lifecycle rules (a rule the server accepts comes
//! back from GetBucketLifecycleConfiguration as an equal rule), tagging bodies and RestoreObject tiers. The
//! first byte picks the body's type; the preflight's origin, method and headers follow the body after a NUL.
#![no_main]
use libfuzzer_sys::fuzz_target;
use permafrost_s3::fuzzing;

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let (body, extra) = match rest.iter().position(|&b| b == 0) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (rest, &[][..]),
    };
    let extra = String::from_utf8_lossy(extra);
    match kind % 4 {
        0 => {
            let mut fields = extra.split('\n');
            let origin = fields.next().unwrap_or("");
            let method = fields.next().unwrap_or("GET");
            let headers: Vec<String> = fields.map(str::to_ascii_lowercase).collect();
            let _ = fuzzing::cors_configuration(body, origin, method, &headers);
        }
        1 => {
            let _ = fuzzing::lifecycle_configuration(body);
        }
        2 => {
            let _ = fuzzing::tagging(body, &extra);
        }
        _ => {
            let _ = fuzzing::restore_request(body);
        }
    }
});
