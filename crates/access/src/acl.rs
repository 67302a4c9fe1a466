//! Access control lists as S3 has them: grants of `READ`, `WRITE`, `READ_ACP`, `WRITE_ACP` or `FULL_CONTROL`
//! to an access key, to everyone (`AllUsers`) or to every holder of a key of this server
//! (`AuthenticatedUsers`), on a bucket or an object; and the canned ACLs that spell the common ones. The owner's
//! full control is implicit (it is the owner's by ownership, not by a grant).

use serde::{Deserialize, Serialize};

use crate::policy::Asker;

/// Who a grant is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grantee {
    /// An access key, by name.
    Key(String),
    /// Everyone, anonymous requests included (`http://acs.amazonaws.com/groups/global/AllUsers`).
    AllUsers,
    /// Every request signed by a key of this server (`…/global/AuthenticatedUsers`).
    AuthenticatedUsers,
}

/// `http://acs.amazonaws.com/groups/global/AllUsers`.
pub const ALL_USERS_URI: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
/// `http://acs.amazonaws.com/groups/global/AuthenticatedUsers`.
pub const AUTHENTICATED_USERS_URI: &str =
    "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";

/// What a grant allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AclPermission {
    Read,
    Write,
    ReadAcp,
    WriteAcp,
    FullControl,
}

impl AclPermission {
    pub fn as_str(self) -> &'static str {
        match self {
            AclPermission::Read => "READ",
            AclPermission::Write => "WRITE",
            AclPermission::ReadAcp => "READ_ACP",
            AclPermission::WriteAcp => "WRITE_ACP",
            AclPermission::FullControl => "FULL_CONTROL",
        }
    }

    pub fn parse(text: &str) -> Result<AclPermission, String> {
        Ok(match text {
            "READ" => AclPermission::Read,
            "WRITE" => AclPermission::Write,
            "READ_ACP" => AclPermission::ReadAcp,
            "WRITE_ACP" => AclPermission::WriteAcp,
            "FULL_CONTROL" => AclPermission::FullControl,
            other => {
                return Err(format!(
                "ACL permission {other}: expected READ, WRITE, READ_ACP, WRITE_ACP or FULL_CONTROL"
            ))
            }
        })
    }

    /// The IAM actions this permission allows on a bucket or an object.
    fn actions(self, on_object: bool) -> &'static [&'static str] {
        match (self, on_object) {
            (AclPermission::Read, false) => &[
                "s3:ListBucket",
                "s3:ListBucketVersions",
                "s3:ListBucketMultipartUploads",
            ],
            (AclPermission::Write, false) => &[
                "s3:PutObject",
                "s3:DeleteObject",
                "s3:DeleteObjectVersion",
                "s3:AbortMultipartUpload",
                "s3:ListMultipartUploadParts",
            ],
            (AclPermission::ReadAcp, false) => &["s3:GetBucketAcl"],
            (AclPermission::WriteAcp, false) => &["s3:PutBucketAcl"],
            (AclPermission::Read, true) => &["s3:GetObject", "s3:GetObjectVersion"],
            (AclPermission::Write, true) => &[],
            (AclPermission::ReadAcp, true) => &["s3:GetObjectAcl"],
            (AclPermission::WriteAcp, true) => &["s3:PutObjectAcl"],
            (AclPermission::FullControl, _) => &[],
        }
    }

    fn allows(self, action: &str, on_object: bool) -> bool {
        if self == AclPermission::FullControl {
            return [
                AclPermission::Read,
                AclPermission::Write,
                AclPermission::ReadAcp,
                AclPermission::WriteAcp,
            ]
            .iter()
            .any(|p| p.allows(action, on_object));
        }
        self.actions(on_object).contains(&action)
    }
}

/// One grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclGrant {
    pub grantee: Grantee,
    pub permission: AclPermission,
}

/// The grants of a bucket or an object beyond its owner's full control.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Acl {
    pub grants: Vec<AclGrant>,
}

impl Acl {
    /// A canned ACL (`x-amz-acl`).
    pub fn canned(name: &str) -> Result<Acl, String> {
        let grant = |grantee, permission| AclGrant {
            grantee,
            permission,
        };
        let grants = match name {
            // The bucket-owner ones describe cross-account uploads: here every bucket and object has one owner.
            "private" | "bucket-owner-read" | "bucket-owner-full-control" => vec![],
            "public-read" => vec![grant(Grantee::AllUsers, AclPermission::Read)],
            "public-read-write" => vec![
                grant(Grantee::AllUsers, AclPermission::Read),
                grant(Grantee::AllUsers, AclPermission::Write),
            ],
            "authenticated-read" => vec![grant(Grantee::AuthenticatedUsers, AclPermission::Read)],
            other => {
                return Err(format!(
                    "canned ACL {other} is not supported: private, public-read, public-read-write, \
                     authenticated-read, bucket-owner-read or bucket-owner-full-control"
                ))
            }
        };
        Ok(Acl { grants })
    }

    /// Read the stored form (empty text: no grants).
    pub fn from_json(text: &str) -> Acl {
        if text.trim().is_empty() {
            return Acl::default();
        }
        // A row written by a newer build that this one cannot read grants nothing.
        serde_json::from_str(text).unwrap_or_default()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("an ACL serializes")
    }

    /// Whether a grant is for a group outside the named keys (AWS calls both groups public).
    pub fn is_public(&self) -> bool {
        self.grants
            .iter()
            .any(|g| matches!(g.grantee, Grantee::AllUsers | Grantee::AuthenticatedUsers))
    }

    /// Whether a grant lets `asker` do `action` (`ignore_public`: Block Public Access ignores the groups).
    pub fn allows(
        &self,
        asker: Asker<'_>,
        action: &str,
        on_object: bool,
        ignore_public: bool,
    ) -> bool {
        self.grants.iter().any(|g| {
            let who = match (&g.grantee, asker) {
                (Grantee::AllUsers, _) => !ignore_public,
                (Grantee::AuthenticatedUsers, Asker::Key(_)) => !ignore_public,
                (Grantee::AuthenticatedUsers, Asker::Anonymous) => false,
                (Grantee::Key(name), Asker::Key(asker)) => name == asker,
                (Grantee::Key(_), Asker::Anonymous) => false,
            };
            who && g.permission.allows(action, on_object)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canned_acls_grant_what_s3_documents() {
        let public = Acl::canned("public-read").unwrap();
        assert!(public.is_public());
        assert!(public.allows(Asker::Anonymous, "s3:GetObject", true, false));
        assert!(public.allows(Asker::Anonymous, "s3:ListBucket", false, false));
        assert!(!public.allows(Asker::Anonymous, "s3:PutObject", false, false));
        assert!(
            !public.allows(Asker::Anonymous, "s3:GetObject", true, true),
            "ignored when blocked"
        );
        let rw = Acl::canned("public-read-write").unwrap();
        assert!(rw.allows(Asker::Anonymous, "s3:PutObject", false, false));
        let auth = Acl::canned("authenticated-read").unwrap();
        assert!(auth.allows(Asker::Key("k"), "s3:GetObject", true, false));
        assert!(!auth.allows(Asker::Anonymous, "s3:GetObject", true, false));
        assert!(!Acl::canned("private").unwrap().is_public());
        assert!(Acl::canned("log-delivery-write").is_err());
    }

    #[test]
    fn a_grant_to_a_key_is_for_that_key_and_full_control_covers_all() {
        let acl = Acl {
            grants: vec![AclGrant {
                grantee: Grantee::Key("reader".into()),
                permission: AclPermission::FullControl,
            }],
        };
        assert!(!acl.is_public());
        assert!(acl.allows(Asker::Key("reader"), "s3:GetObject", true, false));
        assert!(acl.allows(Asker::Key("reader"), "s3:PutBucketAcl", false, false));
        assert!(!acl.allows(Asker::Key("other"), "s3:GetObject", true, false));
        assert_eq!(Acl::from_json(&acl.to_json()), acl);
        assert_eq!(Acl::from_json(""), Acl::default());
    }
}
