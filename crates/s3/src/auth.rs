//! Request signing and authorization.
//!
//! - **Signing**: AWS Signature V4 (headers, presigned URLs, `aws-chunked` bodies) is checked by s3s against the
//!   secret [`KeyAuth`] hands it: the root user's or an access key's (`permafrost-access`). An unknown or
//!   disabled key is `403 InvalidAccessKeyId`, saying which.
//! - **Authorization**: [`Authorizer`] is s3s's access hook. Before an operation's input is parsed it finds
//!   the signer ([`permafrost_access::Principal`], kept in the request's extensions for the handlers and the
//!   log), classifies the operation (`permafrost_access::OPERATIONS`) and decides on the bucket and key of the
//!   path (with a `versionId`, as IAM's version actions; a refused read may still be allowed by the object's
//!   own ACL); then, per operation, what needs the input: the source of a copy (read), a public canned ACL
//!   on a write (owner, and Block Public Access), bypassing a GOVERNANCE retention and removing a legal hold
//!   (owner). Each key of a DeleteObjects is decided again by its handler. A refusal is `403 AccessDenied`
//!   naming the key, the operation, the bucket and the permission that was missing.

use std::sync::Arc;

use permafrost_access::{operations, Access, Operation, Principal};
use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::dto::*;
use s3s::path::S3Path;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Result};

pub use permafrost_access::RootCredentials as Credentials;

/// The key provider: the secrets of the root user and of every enabled access key.
pub(crate) struct KeyAuth {
    access: Arc<Access>,
}

impl KeyAuth {
    pub(crate) fn new(access: Arc<Access>) -> KeyAuth {
        KeyAuth { access }
    }
}

#[async_trait::async_trait]
impl S3Auth for KeyAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.access.secret_of(access_key) {
            Ok((_, secret)) => Ok(SecretKey::from(secret)),
            Err(why) => Err(S3Error::with_message(
                S3ErrorCode::InvalidAccessKeyId,
                format!("The AWS Access Key Id you provided does not exist in our records: {why}."),
            )),
        }
    }
}

/// The principal s3s's access hook found, for handlers (ListBuckets, CreateBucket) and the request log.
pub(crate) fn principal_of(extensions: &http::Extensions) -> Principal {
    extensions
        .get::<Principal>()
        .cloned()
        .unwrap_or(Principal::Anonymous)
}

fn denied(message: String) -> S3Error {
    S3Error::with_message(S3ErrorCode::AccessDenied, message)
}

/// s3s's access hook: every S3 operation is decided here before it runs.
pub(crate) struct Authorizer {
    pub(crate) access: Arc<Access>,
}

impl Authorizer {
    fn decide<T>(
        &self,
        req: &S3Request<T>,
        operation: &Operation,
        bucket: &str,
        key: Option<&str>,
    ) -> S3Result<()> {
        let principal = principal_of(&req.extensions);
        self.access
            .authorize(&principal, operation, bucket, key)
            .map_err(|d| denied(d.message))
    }

    /// Decide; when refused, an object's own ACL may still allow a read (looked up only when some object of
    /// the bucket has one).
    async fn decide_with_object_acl(
        &self,
        principal: &Principal,
        operation: &'static Operation,
        bucket: &str,
        key: Option<&str>,
    ) -> S3Result<()> {
        let table = self.access.table();
        match (table.authorize(principal, operation, bucket, key), key) {
            (Ok(()), _) => Ok(()),
            (Err(refused), Some(key)) if table.object_acl_may_allow(operation, bucket) => {
                let (access, b, k) = (
                    Arc::clone(&self.access),
                    bucket.to_string(),
                    key.to_string(),
                );
                let acl = crate::acl::change(move || access.object_acl(&b, &k)).await?;
                table
                    .authorize_with_object_acl(principal, operation, bucket, Some(key), &acl)
                    .map_err(|_| denied(refused.message))
            }
            (Err(refused), _) => Err(denied(refused.message)),
        }
    }

    /// A copy's source must be readable by the signer (its ACL counts).
    async fn copy_source<T>(&self, req: &S3Request<T>, source: &CopySource) -> S3Result<()> {
        match source {
            CopySource::Bucket {
                bucket,
                key,
                version_id,
            } => {
                let operation = match version_id {
                    Some(_) => &operations::GET_OBJECT_VERSION,
                    None => &operations::COPY_SOURCE,
                };
                let principal = principal_of(&req.extensions);
                self.decide_with_object_acl(&principal, operation, bucket, Some(key))
                    .await
            }
            _ => Err(S3Error::with_message(
                S3ErrorCode::NotImplemented,
                "access points and outposts are not supported: name the source as BUCKET/KEY",
            )),
        }
    }

    /// A canned ACL other than `private` on a write is a PutObjectAcl too (the owner's).
    fn canned_acl<T>(
        &self,
        req: &S3Request<T>,
        bucket: &str,
        key: &str,
        acl: Option<&ObjectCannedACL>,
    ) -> S3Result<()> {
        match acl {
            Some(acl) if acl.as_str() != ObjectCannedACL::PRIVATE => {
                let operation = permafrost_access::classify("PutObjectAcl")
                    .expect("PutObjectAcl is classified");
                self.decide(req, operation, bucket, Some(key))?;
                // Refused before a byte is written when Block Public Access forbids it.
                let canned = permafrost_access::Acl::canned(acl.as_str())
                    .map_err(|m| S3Error::with_message(S3ErrorCode::InvalidArgument, m))?;
                let table = self.access.table();
                if canned.is_public() && table.block(bucket).block_public_acls {
                    return Err(denied(table.blocked_reason(bucket, "BlockPublicAcls")));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn bypass<T>(&self, req: &S3Request<T>, bucket: &str, key: Option<&str>) -> S3Result<()> {
        self.decide(req, &operations::BYPASS_GOVERNANCE, bucket, key)
    }
}

#[async_trait::async_trait]
impl S3Access for Authorizer {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        // A form whose signature `post_object` checked (s3s would refuse its old x-amz-date) comes unsigned.
        let posted = cx.s3_op().name() == "PostObject";
        let form_signer = if posted && cx.credentials().is_none() {
            cx.extensions_mut()
                .get::<crate::post_object::VerifiedFormSigner>()
                .map(|s| s.0.clone())
        } else {
            None
        };
        let principal = self.access.principal(
            cx.credentials()
                .map(|c| c.access_key.as_str())
                .or(form_signer.as_deref()),
        );
        let name = cx.s3_op().name();
        if name == "PostObject" {
            // The key is a form field: decided in `post_object` once the form is read.
            cx.extensions_mut().insert(principal);
            return Ok(());
        }
        let versioned = cx
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|p| p.starts_with("versionId=")));
        let decision = match permafrost_access::classify(name) {
            None if principal.is_root() => Ok(()),
            None => Err(denied(format!(
                "{name} is not open to access keys on this server (only the root user may use it)"
            ))),
            Some(operation) => {
                let operation = if versioned {
                    operations::with_version(operation)
                } else {
                    operation
                };
                let (bucket, key) = match cx.s3_path() {
                    S3Path::Root => (String::new(), None),
                    S3Path::Bucket { bucket } => (bucket.to_string(), None),
                    S3Path::Object { bucket, key } => (bucket.to_string(), Some(key.to_string())),
                };
                self.decide_with_object_acl(&principal, operation, &bucket, key.as_deref())
                    .await
            }
        };
        cx.extensions_mut().insert(principal);
        decision
    }

    async fn put_object(&self, req: &mut S3Request<PutObjectInput>) -> S3Result<()> {
        self.canned_acl(
            req,
            &req.input.bucket,
            &req.input.key,
            req.input.acl.as_ref(),
        )
    }

    /// An HTML form upload is a PutObject of its final key (`${filename}` replaced) for its signer.
    async fn post_object(&self, req: &mut S3Request<PostObjectInput>) -> S3Result<()> {
        let key = crate::post_object::final_key(&req.input.key, &req.extensions)?;
        let principal = principal_of(&req.extensions);
        let operation =
            permafrost_access::classify("PostObject").expect("PostObject is classified");
        self.decide_with_object_acl(&principal, operation, &req.input.bucket, Some(&key))
            .await?;
        let acl = crate::post_object::canned_acl(req.input.acl.as_ref(), &req.extensions);
        self.canned_acl(req, &req.input.bucket, &key, acl.as_ref())
    }

    async fn copy_object(&self, req: &mut S3Request<CopyObjectInput>) -> S3Result<()> {
        self.canned_acl(
            req,
            &req.input.bucket,
            &req.input.key,
            req.input.acl.as_ref(),
        )?;
        self.copy_source(req, &req.input.copy_source).await
    }

    async fn create_multipart_upload(
        &self,
        req: &mut S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<()> {
        match &req.input.acl {
            Some(acl) if acl.as_str() != ObjectCannedACL::PRIVATE => Err(S3Error::with_message(
                S3ErrorCode::NotImplemented,
                format!(
                    "a canned ACL ({}) on a multipart upload is not supported: complete the upload, then \
                     PutObjectAcl",
                    acl.as_str()
                ),
            )),
            _ => Ok(()),
        }
    }

    async fn upload_part_copy(&self, req: &mut S3Request<UploadPartCopyInput>) -> S3Result<()> {
        self.copy_source(req, &req.input.copy_source).await
    }

    async fn delete_object(&self, req: &mut S3Request<DeleteObjectInput>) -> S3Result<()> {
        if req.input.bypass_governance_retention == Some(true) {
            self.bypass(req, &req.input.bucket, Some(&req.input.key))?;
        }
        Ok(())
    }

    async fn delete_objects(&self, req: &mut S3Request<DeleteObjectsInput>) -> S3Result<()> {
        if req.input.bypass_governance_retention == Some(true) {
            self.bypass(req, &req.input.bucket, None)?;
        }
        Ok(())
    }

    async fn put_object_retention(
        &self,
        req: &mut S3Request<PutObjectRetentionInput>,
    ) -> S3Result<()> {
        if req.input.bypass_governance_retention == Some(true) {
            self.bypass(req, &req.input.bucket, Some(&req.input.key))?;
        }
        Ok(())
    }

    async fn put_object_legal_hold(
        &self,
        req: &mut S3Request<PutObjectLegalHoldInput>,
    ) -> S3Result<()> {
        let off = req
            .input
            .legal_hold
            .as_ref()
            .and_then(|h| h.status.as_ref())
            .is_some_and(|s| s.as_str() == ObjectLockLegalHoldStatus::OFF);
        if off {
            self.decide(
                req,
                &operations::LEGAL_HOLD_OFF,
                &req.input.bucket,
                Some(&req.input.key),
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// The operations of `impl S3 for PermafrostS3` (service.rs), as S3 names them.
    fn implemented() -> Vec<String> {
        let source = include_str!("service.rs");
        let start = source
            .find("impl S3 for PermafrostS3 {")
            .expect("the S3 impl");
        let end = start + source[start..].find("\n}\n").expect("its end");
        source[start..end]
            .split("async fn ")
            .skip(1)
            .map(|rest| {
                let name = &rest[..rest.find('(').expect("a parameter list")];
                name.split('_')
                    .map(|w| w[..1].to_uppercase() + &w[1..])
                    .collect::<String>()
            })
            .collect()
    }

    #[test]
    fn every_operation_the_server_implements_is_classified() {
        let names = implemented();
        assert!(names.len() > 40, "found only {names:?}");
        assert!(names.iter().any(|n| n == "GetObject"));
        let unclassified: Vec<_> = names
            .iter()
            .filter(|n| permafrost_access::classify(n).is_none())
            .collect();
        assert!(
            unclassified.is_empty(),
            "classify these in permafrost_access::OPERATIONS: {unclassified:?}"
        );
    }
}
