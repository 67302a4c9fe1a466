//! ACLs and policies, answered honestly: there is one user (the root credentials), who owns everything, and
//! nothing is ever readable or writable without a valid signature. GetBucketAcl/GetObjectAcl return the owner's
//! FULL_CONTROL; PutBucketAcl/PutObjectAcl accept `private` (what is true) and refuse anything that would open
//! access; GetBucketPolicy answers `NoSuchBucketPolicy`, GetBucketPolicyStatus "not public", and
//! GetPublicAccessBlock that all public access is blocked.

use std::sync::Arc;

use permafrost_store::Store;
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use crate::bridge::blocking;
use crate::common::{owner, OWNER_ID};

const NOT_PUBLIC: &str =
    "this server has one user (the root credentials); every request must be signed by \
     it, so nothing can be made public or shared: only the canned ACL \"private\" is accepted";

fn owner_grants() -> Grants {
    vec![Grant {
        grantee: Some(Grantee {
            display_name: Some(OWNER_ID.into()),
            email_address: None,
            id: Some(OWNER_ID.into()),
            type_: Type::from_static(Type::CANONICAL_USER),
            uri: None,
        }),
        permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
    }]
}

/// Whether an ACL request asks for nothing more than the owner's full control.
fn only_private(
    canned: Option<&str>,
    policy: Option<&AccessControlPolicy>,
    grants: [Option<&String>; 5],
) -> S3Result<()> {
    let canned_ok = canned.is_none_or(|c| c == "private");
    let grants_ok = grants.iter().all(|g| {
        g.is_none_or(|g| {
            g.split(',').all(|one| {
                one.trim() == format!("id={OWNER_ID}") || one.trim() == format!("id=\"{OWNER_ID}\"")
            })
        })
    });
    let policy_ok = policy.is_none_or(|p| {
        p.grants.as_ref().is_none_or(|grants| {
            grants.iter().all(|g| {
                g.grantee
                    .as_ref()
                    .is_some_and(|e| e.id.as_deref() == Some(OWNER_ID))
            })
        })
    });
    if canned_ok && grants_ok && policy_ok {
        Ok(())
    } else {
        Err(S3Error::with_message(S3ErrorCode::AccessDenied, NOT_PUBLIC))
    }
}

async fn bucket_exists(store: &Arc<Store>, bucket: &str) -> S3Result<()> {
    let store = Arc::clone(store);
    let bucket = bucket.to_owned();
    blocking(move || store.head_bucket(&bucket))
        .await
        .map(|_| ())
}

pub(crate) async fn get_bucket_acl(
    store: &Arc<Store>,
    req: S3Request<GetBucketAclInput>,
) -> S3Result<S3Response<GetBucketAclOutput>> {
    bucket_exists(store, &req.input.bucket).await?;
    Ok(S3Response::new(GetBucketAclOutput {
        grants: Some(owner_grants()),
        owner: Some(owner()),
    }))
}

pub(crate) async fn put_bucket_acl(
    store: &Arc<Store>,
    req: S3Request<PutBucketAclInput>,
) -> S3Result<S3Response<PutBucketAclOutput>> {
    let i = &req.input;
    bucket_exists(store, &i.bucket).await?;
    only_private(
        i.acl.as_ref().map(|a| a.as_str()),
        i.access_control_policy.as_ref(),
        [
            i.grant_full_control.as_ref(),
            i.grant_read.as_ref(),
            i.grant_read_acp.as_ref(),
            i.grant_write.as_ref(),
            i.grant_write_acp.as_ref(),
        ],
    )?;
    Ok(S3Response::new(PutBucketAclOutput {}))
}

pub(crate) async fn get_object_acl(
    store: &Arc<Store>,
    req: S3Request<GetObjectAclInput>,
) -> S3Result<S3Response<GetObjectAclOutput>> {
    let input = req.input;
    let store = Arc::clone(store);
    blocking(move || store.head_version(&input.bucket, &input.key, input.version_id.as_deref()))
        .await?;
    Ok(S3Response::new(GetObjectAclOutput {
        grants: Some(owner_grants()),
        owner: Some(owner()),
        ..Default::default()
    }))
}

pub(crate) async fn put_object_acl(
    store: &Arc<Store>,
    req: S3Request<PutObjectAclInput>,
) -> S3Result<S3Response<PutObjectAclOutput>> {
    let i = req.input;
    only_private(
        i.acl.as_ref().map(|a| a.as_str()),
        i.access_control_policy.as_ref(),
        [
            i.grant_full_control.as_ref(),
            i.grant_read.as_ref(),
            i.grant_read_acp.as_ref(),
            i.grant_write.as_ref(),
            i.grant_write_acp.as_ref(),
        ],
    )?;
    let store = Arc::clone(store);
    blocking(move || store.head_version(&i.bucket, &i.key, i.version_id.as_deref())).await?;
    Ok(S3Response::new(PutObjectAclOutput::default()))
}

pub(crate) async fn get_bucket_policy(
    store: &Arc<Store>,
    req: S3Request<GetBucketPolicyInput>,
) -> S3Result<S3Response<GetBucketPolicyOutput>> {
    bucket_exists(store, &req.input.bucket).await?;
    Err(S3Error::with_message(
        S3ErrorCode::NoSuchBucketPolicy,
        format!(
            "bucket {} has no policy: access is the root user's only",
            req.input.bucket
        ),
    ))
}

pub(crate) async fn put_bucket_policy(
    store: &Arc<Store>,
    req: S3Request<PutBucketPolicyInput>,
) -> S3Result<S3Response<PutBucketPolicyOutput>> {
    bucket_exists(store, &req.input.bucket).await?;
    Err(S3Error::with_message(
        S3ErrorCode::AccessDenied,
        "bucket policies are not supported: this server has one user (the root credentials) and nothing can \
         be shared or made public",
    ))
}

pub(crate) async fn delete_bucket_policy(
    store: &Arc<Store>,
    req: S3Request<DeleteBucketPolicyInput>,
) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
    bucket_exists(store, &req.input.bucket).await?;
    Ok(S3Response::new(DeleteBucketPolicyOutput {}))
}

pub(crate) async fn get_bucket_policy_status(
    store: &Arc<Store>,
    req: S3Request<GetBucketPolicyStatusInput>,
) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
    bucket_exists(store, &req.input.bucket).await?;
    Ok(S3Response::new(GetBucketPolicyStatusOutput {
        policy_status: Some(PolicyStatus {
            is_public: Some(false),
        }),
    }))
}

pub(crate) async fn get_public_access_block(
    store: &Arc<Store>,
    req: S3Request<GetPublicAccessBlockInput>,
) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
    bucket_exists(store, &req.input.bucket).await?;
    Ok(S3Response::new(GetPublicAccessBlockOutput {
        public_access_block_configuration: Some(PublicAccessBlockConfiguration {
            block_public_acls: Some(true),
            block_public_policy: Some(true),
            ignore_public_acls: Some(true),
            restrict_public_buckets: Some(true),
        }),
    }))
}
