//! Every S3 operation the server implements, classified: the IAM action a policy names it by, the permission a
//! key needs for it, and whether it acts on the bucket or on an object. An operation missing here is refused to
//! everyone but the root user ([`classify`] returns `None`): a new operation stays closed until it is
//! classified.

use crate::Permission;

/// What an operation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// This permission on the bucket (or an ACL or policy that allows the action).
    Bucket(Permission),
    /// Any permission on the bucket (HeadBucket, GetBucketLocation: learning that a bucket one may use exists).
    AnyOnBucket,
    /// The key's right to create buckets (CreateBucket).
    CreateBuckets,
    /// Nothing beyond a valid key (ListBuckets lists what the key may see).
    SignedIn,
}

/// One S3 operation as access control sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation {
    /// The operation's name as S3 (and s3s) spells it: `GetObject`.
    pub name: &'static str,
    /// The IAM action of bucket policies: `s3:GetObject`.
    pub action: &'static str,
    pub need: Need,
    /// The operation acts on an object (policy resources `arn:aws:s3:::BUCKET/KEY`), not on the bucket.
    pub on_object: bool,
}

use Need::*;
use Permission::*;

const fn op(name: &'static str, action: &'static str, need: Need, on_object: bool) -> Operation {
    Operation {
        name,
        action,
        need,
        on_object,
    }
}

/// The table (docs/security.md prints it). Object operations first, then bucket operations.
pub const OPERATIONS: &[Operation] = &[
    // Reading objects.
    op("GetObject", "s3:GetObject", Bucket(Read), true),
    op("HeadObject", "s3:GetObject", Bucket(Read), true),
    op(
        "GetObjectAttributes",
        "s3:GetObjectAttributes",
        Bucket(Read),
        true,
    ),
    op(
        "GetObjectTagging",
        "s3:GetObjectTagging",
        Bucket(Read),
        true,
    ),
    op(
        "GetObjectRetention",
        "s3:GetObjectRetention",
        Bucket(Read),
        true,
    ),
    op(
        "GetObjectLegalHold",
        "s3:GetObjectLegalHold",
        Bucket(Read),
        true,
    ),
    op("RestoreObject", "s3:RestoreObject", Bucket(Read), true),
    // Writing objects (a copy also needs read on its source; see `copy_source_need`).
    op("PutObject", "s3:PutObject", Bucket(Write), true),
    // An HTML form upload: decided on the key of its form (`permafrost-s3`'s `auth`), as a PutObject.
    op("PostObject", "s3:PutObject", Bucket(Write), true),
    op("CopyObject", "s3:PutObject", Bucket(Write), true),
    op("CreateMultipartUpload", "s3:PutObject", Bucket(Write), true),
    op("UploadPart", "s3:PutObject", Bucket(Write), true),
    op("UploadPartCopy", "s3:PutObject", Bucket(Write), true),
    op(
        "CompleteMultipartUpload",
        "s3:PutObject",
        Bucket(Write),
        true,
    ),
    op(
        "AbortMultipartUpload",
        "s3:AbortMultipartUpload",
        Bucket(Write),
        true,
    ),
    op(
        "ListParts",
        "s3:ListMultipartUploadParts",
        Bucket(Write),
        true,
    ),
    op(
        "PutObjectTagging",
        "s3:PutObjectTagging",
        Bucket(Write),
        true,
    ),
    op(
        "DeleteObjectTagging",
        "s3:DeleteObjectTagging",
        Bucket(Write),
        true,
    ),
    // A retention or a legal hold only protects more; shortening a GOVERNANCE retention needs the bypass
    // header, which needs owner, and removing a legal hold needs owner (see `crate::Access`).
    op(
        "PutObjectRetention",
        "s3:PutObjectRetention",
        Bucket(Write),
        true,
    ),
    op(
        "PutObjectLegalHold",
        "s3:PutObjectLegalHold",
        Bucket(Write),
        true,
    ),
    // Deleting objects.
    op("DeleteObject", "s3:DeleteObject", Bucket(Delete), true),
    // Each key of a DeleteObjects is decided again as a DeleteObject (or DeleteObjectVersion).
    op("DeleteObjects", "s3:DeleteObject", Bucket(Delete), true),
    // The owner's: who may see and change access, and the bucket's own configuration.
    op("GetObjectAcl", "s3:GetObjectAcl", Bucket(Owner), true),
    op("PutObjectAcl", "s3:PutObjectAcl", Bucket(Owner), true),
    // Buckets.
    op("ListBuckets", "s3:ListAllMyBuckets", SignedIn, false),
    op("CreateBucket", "s3:CreateBucket", CreateBuckets, false),
    op("HeadBucket", "s3:ListBucket", AnyOnBucket, false),
    op(
        "GetBucketLocation",
        "s3:GetBucketLocation",
        AnyOnBucket,
        false,
    ),
    op("ListObjects", "s3:ListBucket", Bucket(Read), false),
    op("ListObjectsV2", "s3:ListBucket", Bucket(Read), false),
    op(
        "ListObjectVersions",
        "s3:ListBucketVersions",
        Bucket(Read),
        false,
    ),
    op(
        "ListMultipartUploads",
        "s3:ListBucketMultipartUploads",
        Bucket(Write),
        false,
    ),
    op(
        "GetBucketVersioning",
        "s3:GetBucketVersioning",
        Bucket(Read),
        false,
    ),
    op(
        "GetBucketLifecycleConfiguration",
        "s3:GetLifecycleConfiguration",
        Bucket(Read),
        false,
    ),
    op(
        "GetObjectLockConfiguration",
        "s3:GetBucketObjectLockConfiguration",
        Bucket(Read),
        false,
    ),
    op(
        "GetBucketTagging",
        "s3:GetBucketTagging",
        Bucket(Read),
        false,
    ),
    op(
        "PutBucketTagging",
        "s3:PutBucketTagging",
        Bucket(Owner),
        false,
    ),
    op(
        "DeleteBucketTagging",
        "s3:PutBucketTagging",
        Bucket(Owner),
        false,
    ),
    op("DeleteBucket", "s3:DeleteBucket", Bucket(Owner), false),
    op(
        "PutBucketVersioning",
        "s3:PutBucketVersioning",
        Bucket(Owner),
        false,
    ),
    op(
        "PutBucketLifecycleConfiguration",
        "s3:PutLifecycleConfiguration",
        Bucket(Owner),
        false,
    ),
    op(
        "DeleteBucketLifecycle",
        "s3:PutLifecycleConfiguration",
        Bucket(Owner),
        false,
    ),
    op(
        "PutObjectLockConfiguration",
        "s3:PutBucketObjectLockConfiguration",
        Bucket(Owner),
        false,
    ),
    op("GetBucketAcl", "s3:GetBucketAcl", Bucket(Owner), false),
    op("PutBucketAcl", "s3:PutBucketAcl", Bucket(Owner), false),
    op("GetBucketCors", "s3:GetBucketCORS", Bucket(Owner), false),
    op("PutBucketCors", "s3:PutBucketCORS", Bucket(Owner), false),
    op("DeleteBucketCors", "s3:PutBucketCORS", Bucket(Owner), false),
    op(
        "GetBucketPolicy",
        "s3:GetBucketPolicy",
        Bucket(Owner),
        false,
    ),
    op(
        "PutBucketPolicy",
        "s3:PutBucketPolicy",
        Bucket(Owner),
        false,
    ),
    op(
        "DeleteBucketPolicy",
        "s3:DeleteBucketPolicy",
        Bucket(Owner),
        false,
    ),
    op(
        "GetBucketPolicyStatus",
        "s3:GetBucketPolicyStatus",
        Bucket(Owner),
        false,
    ),
    op(
        "GetPublicAccessBlock",
        "s3:GetBucketPublicAccessBlock",
        Bucket(Owner),
        false,
    ),
    op(
        "PutPublicAccessBlock",
        "s3:PutBucketPublicAccessBlock",
        Bucket(Owner),
        false,
    ),
    op(
        "DeletePublicAccessBlock",
        "s3:PutBucketPublicAccessBlock",
        Bucket(Owner),
        false,
    ),
];

/// The archive's own endpoints open to access keys (`permafrost-admin`'s `SCOPED_ENDPOINTS`); everything else
/// under `/_permafrost/` is the root user's.
pub const ARCHIVE_OPERATIONS: &[Operation] = &[
    op(
        "WaitPersisted",
        "permafrost:WaitPersisted",
        Bucket(Read),
        false,
    ),
    op(
        "ListDatasets",
        "permafrost:ListDatasets",
        Bucket(Read),
        false,
    ),
    op("RestoreDataset", "s3:RestoreObject", Bucket(Read), false),
];

/// The action that lets a request bypass a GOVERNANCE retention (`x-amz-bypass-governance-retention`).
pub const BYPASS_GOVERNANCE: Operation = op(
    "BypassGovernanceRetention",
    "s3:BypassGovernanceRetention",
    Bucket(Owner),
    true,
);

/// Reading a version by its id (GetObject and HeadObject with `versionId`): IAM's own action.
pub const GET_OBJECT_VERSION: Operation =
    op("GetObject", "s3:GetObjectVersion", Bucket(Read), true);

/// Removing a version by its id (DeleteObject and a DeleteObjects entry with `versionId`).
pub const DELETE_OBJECT_VERSION: Operation = op(
    "DeleteObject",
    "s3:DeleteObjectVersion",
    Bucket(Delete),
    true,
);

/// The operation a request with `versionId` is decided as: the version actions of IAM for reads and deletes.
pub fn with_version(operation: &'static Operation) -> &'static Operation {
    match operation.name {
        "GetObject" | "HeadObject" => &GET_OBJECT_VERSION,
        "DeleteObject" => &DELETE_OBJECT_VERSION,
        _ => operation,
    }
}

/// Reading the source of a copy (CopyObject, UploadPartCopy).
pub const COPY_SOURCE: Operation = op("GetObject", "s3:GetObject", Bucket(Read), true);

/// Removing a legal hold (PutObjectLegalHold with `OFF`) makes a version deletable again: the owner's.
pub const LEGAL_HOLD_OFF: Operation = op(
    "PutObjectLegalHold",
    "s3:PutObjectLegalHold",
    Bucket(Owner),
    true,
);

/// The operation named `name`, if it is classified.
pub fn classify(name: &str) -> Option<&'static Operation> {
    OPERATIONS
        .iter()
        .chain(ARCHIVE_OPERATIONS)
        .find(|o| o.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_is_classified_once() {
        let mut names: Vec<_> = OPERATIONS.iter().map(|o| o.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "an operation is listed twice");
        assert!(classify("GetObject").is_some());
        assert!(classify("SelectObjectContent").is_none());
    }

    #[test]
    fn actions_are_iam_actions() {
        for o in OPERATIONS {
            assert!(o.action.starts_with("s3:"), "{}", o.name);
        }
    }
}
