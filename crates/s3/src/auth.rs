//! Request signing: AWS Signature V4 (headers, presigned URLs, `aws-chunked` bodies) is checked by s3s
//! against the secret this module hands it. One root user for now.

use s3s::auth::{S3Auth, SecretKey};
use s3s::{S3Error, S3ErrorCode, S3Result};

/// The access key id and secret of the root user.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<hidden>")
            .finish()
    }
}

/// The key provider: the root user's secret, `403 InvalidAccessKeyId` for any other key.
pub(crate) struct RootAuth {
    credentials: Credentials,
}

impl RootAuth {
    pub(crate) fn new(credentials: Credentials) -> RootAuth {
        RootAuth { credentials }
    }
}

#[async_trait::async_trait]
impl S3Auth for RootAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        if access_key == self.credentials.access_key {
            Ok(SecretKey::from(self.credentials.secret_key.clone()))
        } else {
            Err(S3Error::with_message(
                S3ErrorCode::InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records.",
            ))
        }
    }
}
