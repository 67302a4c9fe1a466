//! Bucket policies (PutBucketPolicy's JSON), stored ACLs and permission names as the server reads them.
//! Never a panic; a policy that parses answers every question (matching statements, public or not).
#![no_main]
use libfuzzer_sys::fuzz_target;
use permafrost_access::policy::{rename_principal, wildcard_match, Target};
use permafrost_access::{Acl, AclPermission, Asker, Effect, Permission, Policy};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = AclPermission::parse(text);
    let _ = Permission::parse(text);
    let _ = Acl::canned(text);
    let acl = Acl::from_json(text);
    let _ = acl.allows(Asker::Key("alice"), "s3:GetObject", true, false);
    assert_eq!(
        Acl::from_json(&acl.to_json()).to_json(),
        acl.to_json(),
        "a stored ACL reads back"
    );
    if let Some(renamed) = rename_principal(text, "alice", "bob") {
        assert!(serde_json::from_str::<serde_json::Value>(&renamed).is_ok());
    }
    let middle = text
        .char_indices()
        .map(|(i, _)| i)
        .nth(text.chars().count() / 2)
        .unwrap_or(text.len());
    let (pattern, subject) = text.split_at(middle);
    if pattern.len() <= 256 && subject.len() <= 256 {
        let _ = wildcard_match(pattern, subject);
    }
    let Ok(policy) = Policy::parse(text, "bucket") else {
        return;
    };
    let _ = policy.is_public();
    for effect in [Effect::Allow, Effect::Deny] {
        for asker in [Asker::Anonymous, Asker::Key("alice")] {
            for target in [
                Target::Bucket,
                Target::Object("a/b.txt"),
                Target::SomeObject,
            ] {
                let _ = policy
                    .matching(effect, asker, "s3:GetObject", target)
                    .count();
            }
        }
    }
});
