//! Decisions on a real (SQLite) catalog: grants, ownership, explicit Deny, Block Public Access, object ACLs,
//! and what a change made by another process looks like after a refresh.

use std::sync::Arc;

use permafrost_access::{
    classify, Access, AccessError, AccessSettings, Acl, Permission, Principal, RootCredentials,
};
use permafrost_catalog::{BucketSettings, Catalog, SqlCatalog, SqliteOptions};

fn open(dir: &tempfile::TempDir, block_public_access: bool) -> (Arc<SqlCatalog>, Access) {
    let catalog = Arc::new(
        SqlCatalog::open_with(
            &dir.path().join("catalog.sqlite"),
            SqliteOptions { durable: false },
        )
        .unwrap(),
    );
    for b in ["runs", "other"] {
        if catalog.get_bucket(b).unwrap().is_none() {
            catalog
                .create_bucket(b, &BucketSettings::default())
                .unwrap();
        }
    }
    let access = Access::open(
        catalog.clone(),
        RootCredentials {
            access_key: "root".into(),
            secret_key: "rootsecret".into(),
        },
        AccessSettings {
            block_public_access,
        },
    )
    .unwrap();
    (catalog, access)
}

fn key(access: &Access, name: &str) -> Principal {
    let info = access.key_info(name).unwrap();
    access.principal(Some(&info.access_key))
}

fn may(access: &Access, who: &Principal, op: &str, bucket: &str, object: Option<&str>) -> bool {
    access
        .authorize(who, classify(op).unwrap(), bucket, object)
        .is_ok()
}

#[test]
fn grants_allow_what_they_name_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let (_, access) = open(&dir, true);
    access.create_key("robot", false).unwrap();
    access
        .set_permission("robot", "runs", Permission::Write, true)
        .unwrap();
    let robot = key(&access, "robot");
    assert!(may(&access, &robot, "PutObject", "runs", Some("a")));
    assert!(!may(&access, &robot, "GetObject", "runs", Some("a")));
    assert!(!may(&access, &robot, "DeleteObject", "runs", Some("a")));
    assert!(!may(&access, &robot, "PutObject", "other", Some("a")));
    assert!(!may(&access, &robot, "CreateBucket", "new", None));
    let refusal = access
        .authorize(&robot, classify("DeleteObject").unwrap(), "runs", Some("a"))
        .unwrap_err()
        .message;
    assert!(
        refusal.contains("robot") && refusal.contains("DeleteObject") && refusal.contains("runs"),
        "{refusal}"
    );
    assert!(
        refusal.contains("delete") && refusal.contains("has write"),
        "{refusal}"
    );
    assert!(may(&access, &Principal::Root, "DeleteBucket", "runs", None));
    assert!(!may(
        &access,
        &Principal::Anonymous,
        "GetObject",
        "runs",
        Some("a")
    ));
}

#[test]
fn the_creator_owns_its_bucket_until_owner_is_taken_back() {
    let dir = tempfile::tempdir().unwrap();
    let (_, access) = open(&dir, true);
    access.create_key("curator", true).unwrap();
    let curator = key(&access, "curator");
    assert!(may(&access, &curator, "CreateBucket", "runs", None));
    access.set_owner("runs", &curator).unwrap();
    assert!(may(&access, &curator, "PutBucketPolicy", "runs", None));
    assert!(access.table().may_see(&curator, "runs"));
    access
        .set_permission("curator", "runs", Permission::Owner, false)
        .unwrap();
    assert!(!may(&access, &curator, "PutBucketPolicy", "runs", None));
    assert!(access.table().owned_by(&Principal::Root, "runs"));
}

#[test]
fn an_explicit_deny_beats_a_grant_and_a_public_allow() {
    let dir = tempfile::tempdir().unwrap();
    let (_, access) = open(&dir, false);
    access.create_key("reader", false).unwrap();
    access
        .set_permission("reader", "runs", Permission::Read, true)
        .unwrap();
    access
        .set_bucket_policy(
            "runs",
            r#"{"Statement":[
                {"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::runs/*"},
                {"Sid":"raw","Effect":"Deny","Principal":{"AWS":"reader"},"Action":"s3:Get*",
                 "Resource":"arn:aws:s3:::runs/raw/*"}]}"#,
        )
        .unwrap();
    let reader = key(&access, "reader");
    assert!(may(&access, &reader, "GetObject", "runs", Some("cooked/1")));
    assert!(!may(&access, &reader, "GetObject", "runs", Some("raw/1")));
    assert!(may(
        &access,
        &Principal::Anonymous,
        "GetObject",
        "runs",
        Some("raw/1")
    ));
    assert!(!may(
        &access,
        &Principal::Anonymous,
        "PutObject",
        "runs",
        Some("x")
    ));
    assert!(may(
        &access,
        &Principal::Root,
        "GetObject",
        "runs",
        Some("raw/1")
    ));
    let refusal = access
        .authorize(
            &reader,
            classify("GetObject").unwrap(),
            "runs",
            Some("raw/1"),
        )
        .unwrap_err()
        .message;
    assert!(
        refusal.contains("policy denies") && refusal.contains("raw"),
        "{refusal}"
    );
}

#[test]
fn block_public_access_refuses_public_acls_and_policies_and_ignores_stored_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (_, access) = open(&dir, true);
    let public = Acl::canned("public-read").unwrap();
    match access.set_bucket_acl("runs", &public) {
        Err(AccessError::Blocked(m)) => assert!(m.contains("block_public_access"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let policy = r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObject",
        "Resource":"arn:aws:s3:::runs/*"}}"#;
    assert!(matches!(
        access.set_bucket_policy("runs", policy),
        Err(AccessError::Blocked(_))
    ));
    drop(access);
    // Allowed by the server: public until the bucket blocks it itself.
    let (_, access) = open(&dir, false);
    access.set_bucket_policy("runs", policy).unwrap();
    access.set_object_acl("runs", "k", &public).unwrap();
    assert!(may(
        &access,
        &Principal::Anonymous,
        "GetObject",
        "runs",
        Some("x")
    ));
    access
        .set_public_access_block(
            "runs",
            Some(permafrost_access::PublicAccessBlock {
                restrict_public_buckets: true,
                ignore_public_acls: true,
                ..Default::default()
            }),
        )
        .unwrap();
    assert!(!may(
        &access,
        &Principal::Anonymous,
        "GetObject",
        "runs",
        Some("x")
    ));
    let table = access.table();
    let op = classify("GetObject").unwrap();
    assert!(table.object_acl_may_allow(op, "runs"));
    let acl = access.object_acl("runs", "k").unwrap();
    assert!(table
        .authorize_with_object_acl(&Principal::Anonymous, op, "runs", Some("k"), &acl)
        .is_err());
    drop(access);
    // The server blocks again: the stored public policy and ACL count for nothing.
    let (_, access) = open(&dir, true);
    access.set_public_access_block("runs", None).unwrap();
    assert!(!may(
        &access,
        &Principal::Anonymous,
        "GetObject",
        "runs",
        Some("x")
    ));
}

#[test]
fn a_policy_with_unsupported_parts_or_unknown_keys_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_, access) = open(&dir, false);
    let unknown = r#"{"Statement":{"Effect":"Allow","Principal":{"AWS":"ghost"},"Action":"s3:GetObject",
        "Resource":"arn:aws:s3:::runs/*"}}"#;
    match access.set_bucket_policy("runs", unknown) {
        Err(AccessError::MalformedPolicy(m)) => assert!(m.contains("ghost"), "{m}"),
        other => panic!("expected MalformedPolicy, got {other:?}"),
    }
    assert!(access.bucket_policy("runs").is_none());
}

#[test]
fn a_change_made_by_another_process_is_seen_after_a_refresh() {
    let dir = tempfile::tempdir().unwrap();
    let (catalog, server) = open(&dir, true);
    let elsewhere = Access::open_catalog_only(catalog).unwrap();
    elsewhere.create_key("late", false).unwrap();
    assert!(server.key_info("late").is_err());
    assert!(server.refresh().unwrap());
    assert!(server.key_info("late").is_ok());
    assert!(!server.refresh().unwrap(), "nothing changed since");
    elsewhere.update_key("late", Some(false), None).unwrap();
    server.refresh().unwrap();
    let id = server.key_info("late").unwrap().access_key;
    assert!(server.secret_of(&id).unwrap_err().contains("disabled"));
    assert!(server.secret_of("root").is_ok());
    assert!(
        elsewhere.secret_of("root").is_err(),
        "opened to manage keys, it knows no root user"
    );
}

#[test]
fn a_cors_configuration_is_kept_with_the_bucket_row_and_survives_other_changes() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_, access) = open(&dir, true);
        assert_eq!(access.bucket_cors("runs"), None);
        access
            .set_bucket_cors("runs", Some(r#"[{"origins":["*"],"methods":["GET"]}]"#))
            .unwrap();
        // Changing the policy or the ACL of the bucket keeps it.
        access.set_bucket_acl("runs", &Acl::default()).unwrap();
        assert!(access.bucket_cors("runs").unwrap().contains("GET"));
    }
    let (catalog, access) = open(&dir, true);
    assert!(
        access.bucket_cors("runs").unwrap().contains("GET"),
        "read back after reopening"
    );
    assert_eq!(access.bucket_cors("other"), None);
    access.set_bucket_cors("runs", None).unwrap();
    assert_eq!(access.bucket_cors("runs"), None);
    access.set_bucket_cors("runs", Some("[]")).unwrap();
    access.forget_bucket("runs").unwrap();
    assert_eq!(access.bucket_cors("runs"), None, "it goes with the bucket");
    drop(catalog);
}
