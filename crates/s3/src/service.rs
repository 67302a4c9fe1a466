//! The [`s3s::S3`] implementation: each operation delegates to the module of its family.

use std::sync::Arc;

use permafrost_store::Store;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, S3};

use crate::cluster::{LocalHeaders, NodeAnswers, Route};
use crate::{
    acl, bucket, copy, cors, delete, get, lifecycle, list, lock, multipart, post_object, put,
    restore, tagging, versioning,
};
use permafrost_cluster::ClusterNode;

/// The S3 API over one store, and in a cluster its node's view of the others (`crate::cluster`).
pub(crate) struct PermafrostS3 {
    pub(crate) store: Arc<Store>,
    pub(crate) cluster: Option<Arc<ClusterNode>>,
    /// Keys and bucket access: ListBuckets shows what the signer may see, CreateBucket records its owner.
    pub(crate) access: Arc<permafrost_access::Access>,
}

#[async_trait::async_trait]
impl S3 for PermafrostS3 {
    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        // Only the buckets the signer may use.
        let principal = crate::auth::principal_of(&req.extensions);
        let table = self.access.table();
        let mut answer = self.list_all_buckets(req).await?;
        if let Some(buckets) = answer.output.buckets.as_mut() {
            buckets.retain(|b| {
                b.name
                    .as_deref()
                    .is_some_and(|name| table.may_see(&principal, name))
            });
        }
        Ok(answer)
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let principal = crate::auth::principal_of(&req.extensions);
        let name = req.input.bucket.clone();
        let bucket = name.clone();
        let canned = req.input.acl.clone();
        // A public canned ACL that Block Public Access refuses is refused before the bucket exists.
        if let Some(canned) = &canned {
            let acl = permafrost_access::Acl::canned(canned.as_str())
                .map_err(|m| s3s::S3Error::with_message(s3s::S3ErrorCode::InvalidArgument, m))?;
            if acl.is_public() && self.access.blocks_public_access() {
                return Err(s3s::S3Error::with_message(
                    s3s::S3ErrorCode::AccessDenied,
                    format!(
                        "bucket {name} cannot be created with the ACL {}: public access is blocked on this \
                         server (block_public_access = true in the [server] table of permafrost.toml)",
                        canned.as_str()
                    ),
                ));
            }
        }
        let answer = match self.create_any_bucket(req).await {
            // Taken by another owner: S3 says so without saying who.
            Err(e)
                if *e.code() == s3s::S3ErrorCode::BucketAlreadyOwnedByYou
                    && !self.access.table().owned_by(&principal, &name) =>
            {
                return Err(s3s::S3Error::with_message(
                    s3s::S3ErrorCode::BucketAlreadyExists,
                    format!("bucket {name} already exists and belongs to another owner"),
                ));
            }
            other => other?,
        };
        let access = Arc::clone(&self.access);
        crate::bridge::blocking(move || {
            access.set_owner(&name, &principal).map_err(|e| {
                permafrost_store::StoreError::Internal(format!(
                    "bucket {name} was created, but its owner could not be recorded: {e}"
                ))
            })
        })
        .await?;
        acl::create_bucket_acl(&self.access, &bucket, canned.as_ref()).await?;
        Ok(answer)
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let name = req.input.bucket.clone();
        let answer = match &self.cluster {
            Some(c) => {
                // Refused while the directory names an object in it (on any node).
                let (db, name) = (Arc::clone(&c.db), name.clone());
                crate::cluster::blocking(move || db.remove_bucket(&name)).await?;
                match bucket::delete_bucket(&self.store, req).await {
                    Err(e) if *e.code() == s3s::S3ErrorCode::NoSuchBucket => {
                        S3Response::new(DeleteBucketOutput {})
                    }
                    other => other?,
                }
            }
            None => bucket::delete_bucket(&self.store, req).await?,
        };
        // The bucket's owner, ACLs, policy and grants go with it (in a cluster they live in the shared tables).
        let access = Arc::clone(&self.access);
        acl::change(move || access.forget_bucket(&name)).await?;
        Ok(answer)
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        if let Some(c) = &self.cluster {
            let (db, name) = (Arc::clone(&c.db), req.input.bucket.clone());
            if !crate::cluster::blocking(move || db.bucket_exists(&name)).await? {
                return Err(s3s::S3Error::with_message(
                    s3s::S3ErrorCode::NoSuchBucket,
                    format!("no such bucket: {}", req.input.bucket),
                ));
            }
            return Ok(S3Response::new(HeadBucketOutput::default()));
        }
        bucket::head_bucket(&self.store, req).await
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        bucket::get_bucket_location(&self.store, req).await
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
        let canned = req.input.acl.as_ref().map(|a| a.as_str().to_string());
        let answer = match &self.cluster {
            None => put::put_object(&self.store, req).await?,
            Some(c) => {
                c.ensure_local_bucket(&self.store, &bucket).await?;
                let mut req = req;
                let condition = crate::conditional::write_condition(
                    req.input.if_match.as_ref(),
                    req.input.if_none_match.as_ref(),
                )?;
                let held = c
                    .conditional_begins(&self.store, &bucket, &key, condition)
                    .await?;
                if let Some(local) = held.as_ref().and_then(|h| h.local_headers()) {
                    (req.input.if_match, req.input.if_none_match) = local;
                }
                let answer = put::put_object(&self.store, req).await?;
                let written = answer.output.e_tag.as_ref();
                c.publish_written(&self.store, &bucket, &key, held, written)
                    .await?;
                c.replicate(&self.store, &bucket, &key).await?;
                answer
            }
        };
        acl::object_written(&self.access, &bucket, &key, canned.as_deref()).await?;
        Ok(answer)
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        if let (Some(c), None) = (&self.cluster, &req.input.version_id) {
            if !req.headers.contains_key(crate::cluster::FORWARDED_HEADER) {
                let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
                match c.route(&self.store, &bucket, &key).await? {
                    Route::Remote { up, down, .. } => {
                        return Err(ClusterNode::forward_or_unavailable(
                            &bucket, &key, &up, &down,
                        ));
                    }
                    Route::Parity(obj) => return crate::parity::get(c, obj, req.input.range).await,
                    Route::Local => {}
                }
            }
        }
        get::get_object(&self.store, req).await
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        if let (Some(c), None) = (&self.cluster, &req.input.version_id) {
            let route = c
                .route(&self.store, &req.input.bucket, &req.input.key)
                .await?;
            if let Route::Parity(obj) = &route {
                return Ok(S3Response::new(crate::parity::head(obj)));
            }
            if let Route::Remote { entry, .. } = route {
                // Answered from the directory, whether or not a holder is up.
                return Ok(S3Response::new(HeadObjectOutput {
                    accept_ranges: Some("bytes".into()),
                    content_length: i64::try_from(entry.size_bytes).ok(),
                    content_type: entry.content_type,
                    e_tag: Some(crate::common::etag(&entry.etag)),
                    last_modified: Some(crate::common::timestamp(entry.last_modified_ms)),
                    ..Default::default()
                }));
            }
        }
        get::head_object(&self.store, req).await
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let Some(c) = &self.cluster else {
            return delete::delete_object(&self.store, req).await;
        };
        let (bucket, key, current) = (
            req.input.bucket.clone(),
            req.input.key.clone(),
            req.input.version_id.is_none(),
        );
        // A node that never had an object of the bucket deletes everywhere too.
        c.ensure_local_bucket(&self.store, &bucket).await?;
        let answer = delete::delete_object(&self.store, req).await?;
        if current {
            c.delete_everywhere(&bucket, &key).await?;
        }
        Ok(answer)
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        if let Some(c) = &self.cluster {
            c.ensure_local_bucket(&self.store, &req.input.bucket)
                .await?;
        }
        // Each key is decided again (a policy may deny or allow by prefix, or the version actions).
        let principal = crate::auth::principal_of(&req.extensions);
        let table = self.access.table();
        let bucket = req.input.bucket.clone();
        let delete =
            permafrost_access::classify("DeleteObject").expect("DeleteObject is classified");
        let refused = move |key: &str, version: Option<&str>| {
            let operation = match version {
                Some(_) => permafrost_access::operations::with_version(delete),
                None => delete,
            };
            table
                .authorize(&principal, operation, &bucket, Some(key))
                .err()
                .map(|d| d.message)
        };
        delete::delete_objects(&self.store, self.cluster.as_ref(), req, refused).await
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
        let canned = req.input.acl.as_ref().map(|a| a.as_str().to_string());
        let answer = match &self.cluster {
            None => copy::copy_object(&self.store, req).await?,
            Some(c) => {
                c.ensure_local_bucket(&self.store, &bucket).await?;
                let mut req = req;
                let condition = crate::conditional::write_condition_of_headers(&req.headers)?;
                let held = c
                    .conditional_begins(&self.store, &bucket, &key, condition)
                    .await?;
                if let Some(h) = &held {
                    h.set_local_headers(&mut req.headers);
                }
                let answer = copy::copy_object(&self.store, req).await?;
                let written = answer.output.copy_object_result.as_ref();
                let written = written.and_then(|r| r.e_tag.as_ref());
                c.publish_written(&self.store, &bucket, &key, held, written)
                    .await?;
                c.replicate(&self.store, &bucket, &key).await?;
                answer
            }
        };
        acl::object_written(&self.access, &bucket, &key, canned.as_deref()).await?;
        Ok(answer)
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        list::list_objects(&self.store, self.cluster.as_ref(), req).await
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        list::list_objects_v2(&self.store, self.cluster.as_ref(), req).await
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        if let Some(c) = &self.cluster {
            c.ensure_local_bucket(&self.store, &req.input.bucket)
                .await?;
        }
        multipart::create_multipart_upload(&self.store, req).await
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        multipart::upload_part(&self.store, req).await
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
        let mut req = req;
        let mut held = None;
        if let Some(c) = &self.cluster {
            let condition = crate::conditional::write_condition(
                req.input.if_match.as_ref(),
                req.input.if_none_match.as_ref(),
            )?;
            held = c
                .conditional_begins(&self.store, &bucket, &key, condition)
                .await?;
            if let Some(local) = held.as_ref().and_then(|h| h.local_headers()) {
                (req.input.if_match, req.input.if_none_match) = local;
            }
        }
        let answer = multipart::complete_multipart_upload(&self.store, req).await?;
        if let Some(c) = &self.cluster {
            let written = answer.output.e_tag.as_ref();
            c.publish_written(&self.store, &bucket, &key, held, written)
                .await?;
            c.replicate(&self.store, &bucket, &key).await?;
        }
        acl::object_written(&self.access, &bucket, &key, None).await?;
        Ok(answer)
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        multipart::abort_multipart_upload(&self.store, req).await
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        multipart::list_parts(&self.store, req).await
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        multipart::list_multipart_uploads(&self.store, req).await
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        versioning::get_bucket_versioning(&self.store, req).await
    }

    async fn put_bucket_versioning(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        if let Some(c) = &self.cluster {
            c.refuse_versioning_with_copies(&req.input.bucket).await?;
        }
        versioning::put_bucket_versioning(&self.store, req).await
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        versioning::list_object_versions(&self.store, req).await
    }

    async fn put_object_tagging(
        &self,
        req: S3Request<PutObjectTaggingInput>,
    ) -> S3Result<S3Response<PutObjectTaggingOutput>> {
        tagging::put_object_tagging(&self.store, req).await
    }

    async fn get_object_tagging(
        &self,
        req: S3Request<GetObjectTaggingInput>,
    ) -> S3Result<S3Response<GetObjectTaggingOutput>> {
        tagging::get_object_tagging(&self.store, req).await
    }

    async fn delete_object_tagging(
        &self,
        req: S3Request<DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
        tagging::delete_object_tagging(&self.store, req).await
    }

    async fn put_bucket_tagging(
        &self,
        req: S3Request<PutBucketTaggingInput>,
    ) -> S3Result<S3Response<PutBucketTaggingOutput>> {
        tagging::put_bucket_tagging(&self.store, req).await
    }

    async fn get_bucket_tagging(
        &self,
        req: S3Request<GetBucketTaggingInput>,
    ) -> S3Result<S3Response<GetBucketTaggingOutput>> {
        tagging::get_bucket_tagging(&self.store, req).await
    }

    async fn delete_bucket_tagging(
        &self,
        req: S3Request<DeleteBucketTaggingInput>,
    ) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
        tagging::delete_bucket_tagging(&self.store, req).await
    }

    async fn put_object_lock_configuration(
        &self,
        req: S3Request<PutObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
        lock::put_object_lock_configuration(&self.store, req).await
    }

    async fn get_object_lock_configuration(
        &self,
        req: S3Request<GetObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
        lock::get_object_lock_configuration(&self.store, req).await
    }

    async fn put_object_retention(
        &self,
        req: S3Request<PutObjectRetentionInput>,
    ) -> S3Result<S3Response<PutObjectRetentionOutput>> {
        lock::put_object_retention(&self.store, req).await
    }

    async fn get_object_retention(
        &self,
        req: S3Request<GetObjectRetentionInput>,
    ) -> S3Result<S3Response<GetObjectRetentionOutput>> {
        lock::get_object_retention(&self.store, req).await
    }

    async fn put_object_legal_hold(
        &self,
        req: S3Request<PutObjectLegalHoldInput>,
    ) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
        lock::put_object_legal_hold(&self.store, req).await
    }

    async fn get_object_legal_hold(
        &self,
        req: S3Request<GetObjectLegalHoldInput>,
    ) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
        lock::get_object_legal_hold(&self.store, req).await
    }

    async fn put_bucket_lifecycle_configuration(
        &self,
        req: S3Request<PutBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
        lifecycle::put_bucket_lifecycle_configuration(&self.store, req).await
    }

    async fn get_bucket_lifecycle_configuration(
        &self,
        req: S3Request<GetBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
        lifecycle::get_bucket_lifecycle_configuration(&self.store, req).await
    }

    async fn delete_bucket_lifecycle(
        &self,
        req: S3Request<DeleteBucketLifecycleInput>,
    ) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
        lifecycle::delete_bucket_lifecycle(&self.store, req).await
    }

    async fn get_bucket_acl(
        &self,
        req: S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        acl::get_bucket_acl(self, req).await
    }

    async fn put_bucket_acl(
        &self,
        req: S3Request<PutBucketAclInput>,
    ) -> S3Result<S3Response<PutBucketAclOutput>> {
        acl::put_bucket_acl(self, req).await
    }

    async fn get_object_acl(
        &self,
        req: S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        acl::get_object_acl(self, req).await
    }

    async fn put_object_acl(
        &self,
        req: S3Request<PutObjectAclInput>,
    ) -> S3Result<S3Response<PutObjectAclOutput>> {
        acl::put_object_acl(self, req).await
    }

    async fn get_bucket_policy(
        &self,
        req: S3Request<GetBucketPolicyInput>,
    ) -> S3Result<S3Response<GetBucketPolicyOutput>> {
        acl::get_bucket_policy(self, req).await
    }

    async fn put_bucket_policy(
        &self,
        req: S3Request<PutBucketPolicyInput>,
    ) -> S3Result<S3Response<PutBucketPolicyOutput>> {
        acl::put_bucket_policy(self, req).await
    }

    async fn delete_bucket_policy(
        &self,
        req: S3Request<DeleteBucketPolicyInput>,
    ) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
        acl::delete_bucket_policy(self, req).await
    }

    async fn get_bucket_policy_status(
        &self,
        req: S3Request<GetBucketPolicyStatusInput>,
    ) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
        acl::get_bucket_policy_status(self, req).await
    }

    async fn get_public_access_block(
        &self,
        req: S3Request<GetPublicAccessBlockInput>,
    ) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
        acl::get_public_access_block(self, req).await
    }

    async fn put_public_access_block(
        &self,
        req: S3Request<PutPublicAccessBlockInput>,
    ) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
        acl::put_public_access_block(self, req).await
    }

    async fn delete_public_access_block(
        &self,
        req: S3Request<DeletePublicAccessBlockInput>,
    ) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
        acl::delete_public_access_block(self, req).await
    }

    async fn restore_object(
        &self,
        req: S3Request<RestoreObjectInput>,
    ) -> S3Result<S3Response<RestoreObjectOutput>> {
        restore::restore_object(&self.store, req).await
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        copy::upload_part_copy(&self.store, req).await
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        get::get_object_attributes(&self.store, req).await
    }

    async fn post_object(
        &self,
        req: S3Request<PostObjectInput>,
    ) -> S3Result<S3Response<PostObjectOutput>> {
        post_object::post_object(self, req).await
    }

    async fn put_bucket_cors(
        &self,
        req: S3Request<PutBucketCorsInput>,
    ) -> S3Result<S3Response<PutBucketCorsOutput>> {
        cors::put_bucket_cors(self, req).await
    }

    async fn get_bucket_cors(
        &self,
        req: S3Request<GetBucketCorsInput>,
    ) -> S3Result<S3Response<GetBucketCorsOutput>> {
        cors::get_bucket_cors(self, req).await
    }

    async fn delete_bucket_cors(
        &self,
        req: S3Request<DeleteBucketCorsInput>,
    ) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
        cors::delete_bucket_cors(self, req).await
    }
}

impl PermafrostS3 {
    /// `NoSuchBucket` unless the bucket exists (in a cluster: in the cluster's directory, on any node).
    pub(crate) async fn bucket_exists(&self, bucket: &str) -> S3Result<()> {
        let exists = match &self.cluster {
            Some(c) => {
                let (db, name) = (Arc::clone(&c.db), bucket.to_string());
                crate::cluster::blocking(move || db.bucket_exists(&name)).await?
            }
            None => {
                let (store, name) = (Arc::clone(&self.store), bucket.to_string());
                crate::bridge::blocking(move || store.head_bucket(&name)).await?;
                true
            }
        };
        if exists {
            Ok(())
        } else {
            Err(s3s::S3Error::with_message(
                s3s::S3ErrorCode::NoSuchBucket,
                format!("no such bucket: {bucket}"),
            ))
        }
    }

    /// Every bucket (of the cluster's directory, or of this store).
    async fn list_all_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        if let Some(c) = &self.cluster {
            let db = Arc::clone(&c.db);
            let buckets = crate::cluster::blocking(move || db.buckets()).await?;
            return Ok(S3Response::new(ListBucketsOutput {
                buckets: Some(
                    buckets
                        .into_iter()
                        .map(|(name, created_ms)| Bucket {
                            name: Some(name),
                            creation_date: Some(crate::common::timestamp(created_ms)),
                            bucket_region: None,
                        })
                        .collect(),
                ),
                owner: Some(crate::common::owner()),
                ..Default::default()
            }));
        }
        bucket::list_buckets(&self.store, req).await
    }

    /// CreateBucket on this store (and in a cluster's directory).
    async fn create_any_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let name = req.input.bucket.clone();
        if self.cluster.is_some() && name == permafrost_catalog::cluster::FRAGMENTS_BUCKET {
            return Err(s3s::S3Error::with_message(
                s3s::S3ErrorCode::InvalidBucketName,
                format!("{name} is reserved in a cluster (it holds the nodes' parity fragments)"),
            ));
        }
        if let Some(c) = &self.cluster {
            // Object Lock makes the bucket versioned from the start.
            if req.input.object_lock_enabled_for_bucket == Some(true) {
                c.refuse_versioning_with_copies(&name).await?;
            }
        }
        let answer = bucket::create_bucket(&self.store, req).await?;
        if let Some(c) = &self.cluster {
            let db = Arc::clone(&c.db);
            crate::cluster::blocking(move || db.add_bucket(&name)).await?;
        }
        Ok(answer)
    }
}
