//! ACLs, bucket policies and Block Public Access (`permafrost-access` keeps and decides them; this module
//! speaks them as S3 does).
//!
//! - **ACLs**: GetBucketAcl/GetObjectAcl answer the owner (the key that created the bucket, or the root user)
//!   with `FULL_CONTROL` and every grant; PutBucketAcl/PutObjectAcl take a canned ACL (`x-amz-acl`), grant
//!   headers (`x-amz-grant-read: id=KEY, uri="…/AllUsers"`) or an `AccessControlPolicy` body. Grantees are
//!   access keys by name (`CanonicalUser` with that ID), `AllUsers` and `AuthenticatedUsers`. An object ACL
//!   belongs to the key's current object: writing a new object there resets it.
//! - **Policies**: Put/Get/DeleteBucketPolicy and GetBucketPolicyStatus (`permafrost_access::policy` says what a
//!   policy may contain; anything else is `MalformedPolicy`, naming it).
//! - **Block Public Access**: Get/Put/DeletePublicAccessBlock per bucket; the server's `block_public_access`
//!   setting blocks everything public on every bucket. A public ACL or policy that is blocked is refused with
//!   `AccessDenied` naming the setting, as S3 does.

use std::sync::Arc;

use permafrost_access::{
    Access, AccessError, Acl, AclGrant, AclPermission, Grantee, PublicAccessBlock, ROOT_NAME,
};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use crate::bridge::blocking;
use crate::common::OWNER_ID;
use crate::service::PermafrostS3;

/// An access error as S3 says it.
pub(crate) fn access_error(e: AccessError) -> S3Error {
    let code = match &e {
        AccessError::NoSuchKey(_) | AccessError::Invalid(_) | AccessError::Exists(_) => {
            S3ErrorCode::InvalidArgument
        }
        AccessError::MalformedPolicy(_) => S3ErrorCode::MalformedPolicy,
        AccessError::Blocked(_) => S3ErrorCode::AccessDenied,
        AccessError::NoSuchBucket(_) => S3ErrorCode::NoSuchBucket,
        AccessError::Catalog(_) => {
            let AccessError::Catalog(c) = e else {
                unreachable!("matched above")
            };
            return crate::error::s3_error(c.into());
        }
    };
    S3Error::with_message(code, e.to_string())
}

/// Run a call of the access table (a change, or a catalog lookup) off the async threads.
pub(crate) async fn change<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, AccessError> + Send + 'static,
) -> S3Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(access_error),
        Err(e) => Err(crate::error::internal(format!(
            "an access task failed: {e}"
        ))),
    }
}

/// The S3 owner of a bucket: its owning key, or the root user.
fn bucket_owner(access: &Access, bucket: &str) -> Owner {
    let name = access
        .table()
        .bucket(bucket)
        .and_then(|b| b.owner.clone())
        .unwrap_or_else(|| OWNER_ID.to_string());
    Owner {
        display_name: Some(name.clone()),
        id: Some(name),
    }
}

pub(crate) fn grantee_dto(grantee: &Grantee) -> s3s::dto::Grantee {
    let (type_, id, uri) = match grantee {
        Grantee::Key(name) => (Type::CANONICAL_USER, Some(name.clone()), None),
        Grantee::AllUsers => (
            Type::GROUP,
            None,
            Some(permafrost_access::acl::ALL_USERS_URI.to_string()),
        ),
        Grantee::AuthenticatedUsers => (
            Type::GROUP,
            None,
            Some(permafrost_access::acl::AUTHENTICATED_USERS_URI.to_string()),
        ),
    };
    s3s::dto::Grantee {
        display_name: id.clone(),
        email_address: None,
        id,
        type_: Type::from_static(type_),
        uri,
    }
}

/// The grants S3 shows: the owner's `FULL_CONTROL`, then the ACL's.
fn grants_dto(owner: &Owner, acl: &Acl) -> Grants {
    let mut grants = vec![Grant {
        grantee: Some(s3s::dto::Grantee {
            display_name: owner.display_name.clone(),
            email_address: None,
            id: owner.id.clone(),
            type_: Type::from_static(Type::CANONICAL_USER),
            uri: None,
        }),
        permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
    }];
    grants.extend(acl.grants.iter().map(|g| Grant {
        grantee: Some(grantee_dto(&g.grantee)),
        permission: Some(Permission::from(g.permission.as_str().to_string())),
    }));
    grants
}

/// A grantee of a request: `id=NAME`, `uri="…"` (grant headers) or a `Grantee` element.
fn grantee_of(
    id: Option<&str>,
    uri: Option<&str>,
    email: Option<&str>,
) -> S3Result<Option<Grantee>> {
    if email.is_some() {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            "grantees by e-mail address are not supported: name an access key (id=NAME) or a group (uri=…)",
        ));
    }
    match (id, uri) {
        (Some(id), _) if id == OWNER_ID || id == ROOT_NAME => Ok(None), // the root user owns by ownership
        (Some(id), _) => Ok(Some(Grantee::Key(id.to_string()))),
        (None, Some(uri)) if uri == permafrost_access::acl::ALL_USERS_URI => {
            Ok(Some(Grantee::AllUsers))
        }
        (None, Some(uri)) if uri == permafrost_access::acl::AUTHENTICATED_USERS_URI => {
            Ok(Some(Grantee::AuthenticatedUsers))
        }
        (None, Some(uri)) => Err(S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            format!("grantee group {uri} is not supported: AllUsers or AuthenticatedUsers"),
        )),
        (None, None) => Err(S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            "a grantee needs an ID (access key name) or a URI (group)",
        )),
    }
}

/// `x-amz-grant-*: id=NAME, uri="http://…"`.
pub(crate) fn header_grants(
    value: Option<&String>,
    permission: AclPermission,
    into: &mut Vec<AclGrant>,
) -> S3Result<()> {
    let Some(value) = value else { return Ok(()) };
    for one in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (kind, what) = one.split_once('=').ok_or_else(|| {
            S3Error::with_message(
                S3ErrorCode::InvalidArgument,
                format!("grant {one:?}: expected id=NAME or uri=\"GROUP URI\""),
            )
        })?;
        let what = what.trim().trim_matches('"');
        let grantee = match kind.trim() {
            "id" => grantee_of(Some(what), None, None)?,
            "uri" => grantee_of(None, Some(what), None)?,
            "emailAddress" => grantee_of(None, None, Some(what))?,
            other => {
                return Err(S3Error::with_message(
                    S3ErrorCode::InvalidArgument,
                    format!("grant {one:?}: {other} is not id, uri or emailAddress"),
                ))
            }
        };
        if let Some(grantee) = grantee {
            into.push(AclGrant {
                grantee,
                permission,
            });
        }
    }
    Ok(())
}

/// The ACL a request asks for: a canned ACL, grant headers or a body (exactly one kind).
pub(crate) fn requested_acl(
    canned: Option<&str>,
    policy: Option<&AccessControlPolicy>,
    headers: [Option<&String>; 5],
) -> S3Result<Acl> {
    let with_headers = headers.iter().any(Option::is_some);
    if [canned.is_some(), policy.is_some(), with_headers]
        .iter()
        .filter(|b| **b)
        .count()
        > 1
    {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidRequest,
            "give a canned ACL, grant headers or an AccessControlPolicy body, not several",
        ));
    }
    if let Some(name) = canned {
        return Acl::canned(name)
            .map_err(|m| S3Error::with_message(S3ErrorCode::InvalidArgument, m));
    }
    let mut grants = Vec::new();
    let permissions = [
        AclPermission::FullControl,
        AclPermission::Read,
        AclPermission::ReadAcp,
        AclPermission::Write,
        AclPermission::WriteAcp,
    ];
    for (value, permission) in headers.into_iter().zip(permissions) {
        header_grants(value, permission, &mut grants)?;
    }
    if let Some(policy) = policy {
        for g in policy.grants.iter().flatten() {
            let permission = g
                .permission
                .as_ref()
                .ok_or_else(|| {
                    S3Error::with_message(
                        S3ErrorCode::MalformedACLError,
                        "a Grant without Permission",
                    )
                })
                .and_then(|p| {
                    AclPermission::parse(p.as_str())
                        .map_err(|m| S3Error::with_message(S3ErrorCode::MalformedACLError, m))
                })?;
            let grantee = g.grantee.as_ref().ok_or_else(|| {
                S3Error::with_message(S3ErrorCode::MalformedACLError, "a Grant without Grantee")
            })?;
            if let Some(grantee) = grantee_of(
                grantee.id.as_deref(),
                grantee.uri.as_deref(),
                grantee.email_address.as_deref(),
            )? {
                grants.push(AclGrant {
                    grantee,
                    permission,
                });
            }
        }
    }
    Ok(Acl { grants })
}

pub(crate) async fn get_bucket_acl(
    s3: &PermafrostS3,
    req: S3Request<GetBucketAclInput>,
) -> S3Result<S3Response<GetBucketAclOutput>> {
    let access = &s3.access;
    let bucket = &req.input.bucket;
    s3.bucket_exists(bucket).await?;
    let owner = bucket_owner(access, bucket);
    let acl = access
        .table()
        .bucket(bucket)
        .map(|b| b.acl.clone())
        .unwrap_or_default();
    Ok(S3Response::new(GetBucketAclOutput {
        grants: Some(grants_dto(&owner, &acl)),
        owner: Some(owner),
    }))
}

pub(crate) async fn put_bucket_acl(
    s3: &PermafrostS3,
    req: S3Request<PutBucketAclInput>,
) -> S3Result<S3Response<PutBucketAclOutput>> {
    let access = &s3.access;
    let i = req.input;
    s3.bucket_exists(&i.bucket).await?;
    let acl = requested_acl(
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
    let access = Arc::clone(access);
    change(move || access.set_bucket_acl(&i.bucket, &acl)).await?;
    Ok(S3Response::new(PutBucketAclOutput {}))
}

/// Apply the canned ACL of a CreateBucket (after the bucket exists).
pub(crate) async fn create_bucket_acl(
    access: &Arc<Access>,
    bucket: &str,
    canned: Option<&BucketCannedACL>,
) -> S3Result<()> {
    let Some(canned) = canned else { return Ok(()) };
    let acl = Acl::canned(canned.as_str())
        .map_err(|m| S3Error::with_message(S3ErrorCode::InvalidArgument, m))?;
    if acl.grants.is_empty() {
        return Ok(());
    }
    let (access, bucket) = (Arc::clone(access), bucket.to_string());
    change(move || access.set_bucket_acl(&bucket, &acl)).await
}

/// After a new object was written at `key`: its canned ACL (`x-amz-acl` of the PUT, copy or multipart
/// upload), or none (an ACL of the object it replaced does not carry over).
pub(crate) async fn object_written(
    access: &Arc<Access>,
    bucket: &str,
    key: &str,
    canned: Option<&str>,
) -> S3Result<()> {
    let acl = match canned {
        Some(name) => {
            Acl::canned(name).map_err(|m| S3Error::with_message(S3ErrorCode::InvalidArgument, m))?
        }
        None => Acl::default(),
    };
    if acl.grants.is_empty() && !access.table().has_object_acls(bucket) {
        return Ok(()); // nothing to reset: no catalog call, no thread hop on the write path
    }
    let (access, bucket, key) = (Arc::clone(access), bucket.to_string(), key.to_string());
    change(move || {
        if acl.grants.is_empty() {
            access.object_written(&bucket, &key)
        } else {
            access.set_object_acl(&bucket, &key, &acl)
        }
    })
    .await
}

pub(crate) async fn get_object_acl(
    s3: &PermafrostS3,
    req: S3Request<GetObjectAclInput>,
) -> S3Result<S3Response<GetObjectAclOutput>> {
    let (store, access) = (&s3.store, &s3.access);
    let input = req.input;
    let (bucket, key) = (input.bucket.clone(), input.key.clone());
    let store = Arc::clone(store);
    blocking(move || store.head_version(&input.bucket, &input.key, input.version_id.as_deref()))
        .await?;
    let owner = bucket_owner(access, &bucket);
    let a = Arc::clone(access);
    let acl = change(move || a.object_acl(&bucket, &key)).await?;
    Ok(S3Response::new(GetObjectAclOutput {
        grants: Some(grants_dto(&owner, &acl)),
        owner: Some(owner),
        ..Default::default()
    }))
}

pub(crate) async fn put_object_acl(
    s3: &PermafrostS3,
    req: S3Request<PutObjectAclInput>,
) -> S3Result<S3Response<PutObjectAclOutput>> {
    let (store, access) = (&s3.store, &s3.access);
    let i = req.input;
    let acl = requested_acl(
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
    let (bucket, key, version) = (i.bucket.clone(), i.key.clone(), i.version_id.clone());
    blocking(move || store.head_version(&bucket, &key, version.as_deref())).await?;
    let access = Arc::clone(access);
    change(move || access.set_object_acl(&i.bucket, &i.key, &acl)).await?;
    Ok(S3Response::new(PutObjectAclOutput::default()))
}

pub(crate) async fn get_bucket_policy(
    s3: &PermafrostS3,
    req: S3Request<GetBucketPolicyInput>,
) -> S3Result<S3Response<GetBucketPolicyOutput>> {
    let access = &s3.access;
    let bucket = &req.input.bucket;
    s3.bucket_exists(bucket).await?;
    match access.bucket_policy(bucket) {
        Some(policy) => Ok(S3Response::new(GetBucketPolicyOutput {
            policy: Some(policy),
        })),
        None => Err(S3Error::with_message(
            S3ErrorCode::NoSuchBucketPolicy,
            format!("The bucket policy does not exist: bucket {bucket} has none"),
        )),
    }
}

pub(crate) async fn put_bucket_policy(
    s3: &PermafrostS3,
    req: S3Request<PutBucketPolicyInput>,
) -> S3Result<S3Response<PutBucketPolicyOutput>> {
    let access = &s3.access;
    let i = req.input;
    s3.bucket_exists(&i.bucket).await?;
    let access = Arc::clone(access);
    change(move || access.set_bucket_policy(&i.bucket, &i.policy)).await?;
    Ok(S3Response::new(PutBucketPolicyOutput {}))
}

pub(crate) async fn delete_bucket_policy(
    s3: &PermafrostS3,
    req: S3Request<DeleteBucketPolicyInput>,
) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
    let access = &s3.access;
    s3.bucket_exists(&req.input.bucket).await?;
    let access = Arc::clone(access);
    change(move || access.delete_bucket_policy(&req.input.bucket)).await?;
    Ok(S3Response::new(DeleteBucketPolicyOutput {}))
}

pub(crate) async fn get_bucket_policy_status(
    s3: &PermafrostS3,
    req: S3Request<GetBucketPolicyStatusInput>,
) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
    let access = &s3.access;
    let bucket = &req.input.bucket;
    s3.bucket_exists(bucket).await?;
    let Some(is_public) = access
        .table()
        .bucket(bucket)
        .and_then(|b| b.policy.as_ref())
        .map(|p| p.is_public())
    else {
        return Err(S3Error::with_message(
            S3ErrorCode::NoSuchBucketPolicy,
            format!("The bucket policy does not exist: bucket {bucket} has none"),
        ));
    };
    Ok(S3Response::new(GetBucketPolicyStatusOutput {
        policy_status: Some(PolicyStatus {
            is_public: Some(is_public),
        }),
    }))
}

pub(crate) async fn get_public_access_block(
    s3: &PermafrostS3,
    req: S3Request<GetPublicAccessBlockInput>,
) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
    let access = &s3.access;
    let bucket = &req.input.bucket;
    s3.bucket_exists(bucket).await?;
    let own = access
        .table()
        .bucket(bucket)
        .and_then(|b| b.public_access_block);
    // With the server's setting on, every flag is in force whatever the bucket says: show what applies.
    let block = if access.blocks_public_access() {
        Some(access.table().block(bucket))
    } else {
        own
    };
    let Some(b) = block else {
        let mut e = S3Error::with_message(
            S3ErrorCode::Custom("NoSuchPublicAccessBlockConfiguration".into()),
            format!(
                "The public access block configuration was not found: bucket {bucket} has none"
            ),
        );
        e.set_status_code(http::StatusCode::NOT_FOUND);
        return Err(e);
    };
    Ok(S3Response::new(GetPublicAccessBlockOutput {
        public_access_block_configuration: Some(PublicAccessBlockConfiguration {
            block_public_acls: Some(b.block_public_acls),
            block_public_policy: Some(b.block_public_policy),
            ignore_public_acls: Some(b.ignore_public_acls),
            restrict_public_buckets: Some(b.restrict_public_buckets),
        }),
    }))
}

pub(crate) async fn put_public_access_block(
    s3: &PermafrostS3,
    req: S3Request<PutPublicAccessBlockInput>,
) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
    let access = &s3.access;
    let i = req.input;
    s3.bucket_exists(&i.bucket).await?;
    let c = i.public_access_block_configuration;
    let block = PublicAccessBlock {
        block_public_acls: c.block_public_acls.unwrap_or(false),
        ignore_public_acls: c.ignore_public_acls.unwrap_or(false),
        block_public_policy: c.block_public_policy.unwrap_or(false),
        restrict_public_buckets: c.restrict_public_buckets.unwrap_or(false),
    };
    let access = Arc::clone(access);
    change(move || access.set_public_access_block(&i.bucket, Some(block))).await?;
    Ok(S3Response::new(PutPublicAccessBlockOutput {}))
}

pub(crate) async fn delete_public_access_block(
    s3: &PermafrostS3,
    req: S3Request<DeletePublicAccessBlockInput>,
) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
    let access = &s3.access;
    s3.bucket_exists(&req.input.bucket).await?;
    let access = Arc::clone(access);
    change(move || access.set_public_access_block(&req.input.bucket, None)).await?;
    Ok(S3Response::new(DeletePublicAccessBlockOutput {}))
}
