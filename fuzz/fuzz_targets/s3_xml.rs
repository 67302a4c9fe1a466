//! Every XML request body the server takes, parsed with s3s's deserializers as the server parses them
//! (CompleteMultipartUpload, DeleteObjects, lifecycle, tagging, ACL, restore, Object Lock configuration,
//! retention and legal hold, CORS, versioning, bucket creation, Block Public Access, notifications). The first
//! byte picks the body's type. Never a panic; a body that parses serializes, and what it serializes to, when
//! it parses, serializes to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use s3s::dto::*;
use s3s::xml;

fn check<T>(body: &[u8])
where
    T: for<'x> xml::Deserialize<'x> + xml::Serialize,
{
    let parse = |b: &[u8]| -> Option<T> {
        let mut d = xml::Deserializer::new(b);
        let v = T::deserialize(&mut d).ok()?;
        d.expect_eof().ok()?;
        Some(v)
    };
    let write = |v: &T| -> Vec<u8> {
        let mut out = Vec::new();
        v.serialize(&mut xml::Serializer::new(&mut out))
            .expect("a parsed body serializes");
        out
    };
    let Some(value) = parse(body) else {
        return;
    };
    let first = write(&value);
    // s3s writes an ETag holding quotes as it is, which does not parse back
    // (fuzz/regressions/s3_xml-etag-with-quotes-does-not-round-trip): the server never writes a request body
    // back, so only what parses again is held to a stable serialization.
    if let Some(again) = parse(&first) {
        assert_eq!(write(&again), first, "serialization is stable");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    match kind % 15 {
        0 => check::<CompletedMultipartUpload>(body),
        1 => check::<Delete>(body),
        2 => check::<BucketLifecycleConfiguration>(body),
        3 => check::<Tagging>(body),
        // The server keeps only what an ACL means (grantee ID or group URI, permission) and writes that back,
        // never the parsed body: a garbled `xsi:type` does not serialize stably in s3s
        // (fuzz/regressions/s3_xml-acl-grantee-type-does-not-round-trip) and does not matter here. The check is
        // the server's own: an accepted ACL survives GetBucketAcl after PutBucketAcl.
        4 => {
            permafrost_s3::fuzzing::access_control_policy(body);
        }
        5 => check::<RestoreRequest>(body),
        6 => check::<ObjectLockConfiguration>(body),
        7 => check::<ObjectLockRetention>(body),
        8 => check::<ObjectLockLegalHold>(body),
        9 => check::<CORSConfiguration>(body),
        10 => check::<VersioningConfiguration>(body),
        11 => check::<CreateBucketConfiguration>(body),
        12 => check::<PublicAccessBlockConfiguration>(body),
        13 => check::<NotificationConfiguration>(body),
        _ => check::<OwnershipControls>(body),
    }
});
