//! Entry points for the fuzz targets in `fuzz/` (not an API): this crate's own parsers of what a client sends,
//! each reachable here with the bytes of one request part. s3s parses the XML; these functions then run the
//! validation and conversion the server runs on it, and check the invariants a fuzzer can check (a conversion
//! that succeeds converts back to the same rule). A panic here is a finding.

use http::{HeaderMap, HeaderValue};
use s3s::dto::{
    AccessControlPolicy, BucketLifecycleConfiguration, CORSConfiguration, ETagCondition, Grant,
    Permission, RestoreRequest, Tagging, Timestamp, TimestampFormat,
};
use s3s::xml;

use crate::conditional::{write_condition, write_condition_of_headers, Preconditions};

fn from_xml<T: for<'x> xml::Deserialize<'x>>(body: &[u8]) -> Option<T> {
    let mut d = xml::Deserializer::new(body);
    let value = T::deserialize(&mut d).ok()?;
    d.expect_eof().ok()?;
    Some(value)
}

/// A PutBucketCors body: s3s's parse, then the server's validation; the rules found are matched against the
/// `origin`, `method` and request `headers` of a preflight. Returns the number of valid rules, if valid.
pub fn cors_configuration(
    body: &[u8],
    origin: &str,
    method: &str,
    headers: &[String],
) -> Option<usize> {
    let config: CORSConfiguration = from_xml(body)?;
    let rules = crate::cors::rules_of(&config).ok()?;
    // Stored as JSON: what is stored reads back the same.
    let stored = serde_json::to_string(&rules).expect("CORS rules serialize");
    let back: Vec<crate::cors::Rule> =
        serde_json::from_str(&stored).expect("stored CORS rules read back");
    assert_eq!(back, rules, "stored CORS rules read back unchanged");
    let _ = crate::cors::matching(&rules, origin, method, headers);
    Some(rules.len())
}

/// A PutBucketLifecycleConfiguration body: every rule the server accepts converts back (GetBucketLifecycle's
/// answer) to a rule that is accepted again and equal.
pub fn lifecycle_configuration(body: &[u8]) -> Option<usize> {
    let config: BucketLifecycleConfiguration = from_xml(body)?;
    let mut accepted = 0;
    for r in config.rules {
        let Ok(rule) = crate::lifecycle::rule_from(r) else {
            continue;
        };
        let again = crate::lifecycle::rule_from(crate::lifecycle::rule_to(&rule))
            .expect("a stored lifecycle rule is accepted again");
        assert_eq!(
            again, rule,
            "a lifecycle rule survives GetBucketLifecycleConfiguration"
        );
        accepted += 1;
    }
    Some(accepted)
}

/// A PutObjectTagging/PutBucketTagging body, and an `x-amz-tagging` header: the tags the server would store.
pub fn tagging(body: &[u8], header: &str) -> (Option<usize>, Option<usize>) {
    let from_body = from_xml::<Tagging>(body)
        .and_then(|t| crate::tagging::pairs(t).ok())
        .map(|tags| tags.len());
    let from_header = crate::common::parse_tagging(header).ok().map(|t| t.len());
    (from_body, from_header)
}

/// A RestoreObject body: the tier the server would restore at.
pub fn restore_request(body: &[u8]) -> Option<String> {
    let request: RestoreRequest = from_xml(body)?;
    crate::restore::tier_of(&request)
        .ok()
        .map(|t| t.to_string())
}

/// A PutBucketAcl/PutObjectAcl `AccessControlPolicy` body, through the server's own conversion: the ACL it
/// accepts, written back as GetBucketAcl writes its grants (the server never writes a parsed body back: the
/// grantee's `xsi:type` and display name are not kept), parses to the same ACL. Returns the number of grants.
pub fn access_control_policy(body: &[u8]) -> Option<usize> {
    let policy: AccessControlPolicy = from_xml(body)?;
    let acl = crate::acl::requested_acl(None, Some(&policy), [None; 5]).ok()?;
    let written = AccessControlPolicy {
        grants: Some(
            acl.grants
                .iter()
                .map(|g| Grant {
                    grantee: Some(crate::acl::grantee_dto(&g.grantee)),
                    permission: Some(Permission::from(g.permission.as_str().to_string())),
                })
                .collect(),
        ),
        owner: policy.owner.clone(),
    };
    let mut xml_out = Vec::new();
    xml::Serialize::serialize(&written, &mut xml::Serializer::new(&mut xml_out))
        .expect("an ACL serializes");
    let back: AccessControlPolicy =
        from_xml(&xml_out).expect("an ACL the server writes parses again");
    let again = crate::acl::requested_acl(None, Some(&back), [None; 5])
        .expect("an ACL the server writes is accepted again");
    assert_eq!(
        again, acl,
        "an ACL survives GetBucketAcl after PutBucketAcl"
    );
    Some(acl.grants.len())
}

/// An `x-amz-grant-*` header value: the grants it names.
pub fn grant_header(value: &str) -> Option<usize> {
    let mut grants = Vec::new();
    crate::acl::header_grants(
        Some(&value.to_string()),
        permafrost_access::AclPermission::Read,
        &mut grants,
    )
    .ok()?;
    Some(grants.len())
}

/// The first bytes of a POST Object form (`multipart/form-data` with `boundary`): its fields, and its policy
/// checked for `bucket` at `now_ms`. Returns the number of fields read, if the form was complete.
pub fn post_form(body: &[u8], boundary: &str, bucket: &str, now_ms: u64) -> Option<usize> {
    match crate::post_object::scan(body, boundary) {
        crate::post_object::Scan::Complete(form) => {
            assert_eq!(form.fields.len(), form.spans.len());
            for span in &form.spans {
                assert!(
                    span.start <= span.end && span.end <= body.len(),
                    "a field's span is inside the body"
                );
            }
            let _ = crate::post_object::check_policy(&form, bucket, now_ms);
            let read = bytes::Bytes::copy_from_slice(body);
            let kept = crate::post_object::without_signature(&read, &form);
            assert!(kept.len() <= body.len());
            Some(form.fields.len())
        }
        _ => None,
    }
}

/// The conditional headers of a read (`If-Match`, `If-None-Match`, `If-Modified-Since`, `If-Unmodified-Since`)
/// evaluated against a version, and the same `If-Match`/`If-None-Match` as the condition of a write.
pub fn conditions(
    if_match: &[u8],
    if_none_match: &[u8],
    if_modified_since: &str,
    if_unmodified_since: &str,
    stored_etag: &str,
    last_modified_ms: u64,
) {
    let etag = |b: &[u8]| {
        (!b.is_empty())
            .then(|| ETagCondition::parse_http_header(b).ok())
            .flatten()
    };
    let date = |s: &str| {
        (!s.is_empty())
            .then(|| Timestamp::parse(TimestampFormat::HttpDate, s).ok())
            .flatten()
    };
    let p = Preconditions {
        if_match: etag(if_match),
        if_none_match: etag(if_none_match),
        if_modified_since: date(if_modified_since),
        if_unmodified_since: date(if_unmodified_since),
    };
    let _ = p.check_read(stored_etag, last_modified_ms);
    let _ = p.check_copy_source(stored_etag, last_modified_ms);
    let _ = write_condition(p.if_match.as_ref(), p.if_none_match.as_ref());
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_bytes(if_match) {
        headers.insert(http::header::IF_MATCH, v);
    }
    if let Ok(v) = HeaderValue::from_bytes(if_none_match) {
        headers.insert(http::header::IF_NONE_MATCH, v);
    }
    let _ = write_condition_of_headers(&headers);
}

/// An `Accept-Encoding` header: the encodings a GET may answer with.
pub fn accept_encoding(value: &[u8]) -> usize {
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_bytes(value) {
        headers.insert(http::header::ACCEPT_ENCODING, v);
    }
    crate::get::accepted_encodings(&headers).len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The input a 30-minute run of `s3_xml` found (its first byte picks the body's type): a grantee whose
    /// `xsi:type` is garbled. The server's round trip holds for it.
    #[test]
    fn acl_with_a_garbled_grantee_type_survives_the_servers_round_trip() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fuzz/regressions/s3_xml-acl-grantee-type-does-not-round-trip"
        );
        let input = std::fs::read(path).expect("the regression input is in the repository");
        assert_eq!(input[0] % 15, 4, "the input is an AccessControlPolicy body");
        access_control_policy(&input[1..]);
    }

    #[test]
    fn an_acl_body_keeps_its_grants_through_get_after_put() {
        let body = br#"<AccessControlPolicy><Owner><ID>root</ID></Owner><AccessControlList>
            <Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="CanonicalUser">
            <ID>robot</ID></Grantee><Permission>READ</Permission></Grant>
            <Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="Group">
            <URI>http://acs.amazonaws.com/groups/global/AllUsers</URI></Grantee><Permission>READ</Permission></Grant>
            </AccessControlList></AccessControlPolicy>"#;
        assert_eq!(access_control_policy(body), Some(2));
        assert_eq!(access_control_policy(b"<AccessControlPolicy>"), None);
    }
}
