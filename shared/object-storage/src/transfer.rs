//! Signed PUTs of whole objects, and a local stack's bucket creation, through the project's
//! outbound HTTP client (the tools' side; functions only presign).

use crate::{Bucket, SigningError};
use sha2::{Digest, Sha256};
use std::time::{Duration, SystemTime};

/// How long one upload may take, connection to answer.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(600);

/// Why a request to S3 failed.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error(transparent)]
    Signing(#[from] SigningError),
    #[error("S3 could not be reached: {0}")]
    Unreachable(String),
    #[error("S3 answered {status}: {body}")]
    Refused { status: u16, body: String },
}

/// Sends signed requests to one bucket.
#[derive(Debug)]
pub struct Transfer {
    bucket: Bucket,
    client: outbound::Client,
}

/// The SHA-256 of `bytes`, lowercase hex (an object key's content hash, a payload's signature).
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|byte| format!("{byte:02x}")).collect()
}

impl Transfer {
    /// A sender to `bucket`; a private endpoint (a local stack) is allowed by its host name.
    pub fn new(bucket: Bucket) -> Self {
        let host = bucket.url().split("://").nth(1).and_then(|rest| rest.split(['/', ':']).next()).map(str::to_owned);
        let policy = outbound::AddressPolicy::from_setting(host.as_deref())
            .unwrap_or_else(|_| outbound::AddressPolicy::public_only());
        Self { bucket, client: outbound::Client::new(policy).with_timeout(UPLOAD_TIMEOUT) }
    }

    /// The bucket.
    pub fn bucket(&self) -> &Bucket {
        &self.bucket
    }

    /// Stores `bytes` as `key` (a whole-object PUT: up to S3's 5 GB).
    pub async fn put_object(&self, key: &str, bytes: Vec<u8>, content_type: &str) -> Result<(), TransferError> {
        let url = self.bucket.object_url(key);
        let hash = sha256_hex(&bytes);
        let signed = [("content-type", content_type)];
        let headers = self.bucket.sign_headers("PUT", &url, &signed, &hash, SystemTime::now()).await?;
        let request = self.client.put(&url).header("content-type", content_type).body(bytes);
        self.send(request, headers).await.map(drop)
    }

    /// Creates the bucket (a local stack's); one that exists already is left as it is.
    pub async fn create_bucket(&self) -> Result<(), TransferError> {
        let url = self.bucket.url().to_owned();
        // us-east-1 takes no location; any other region must be named in the body.
        let body = match self.bucket.region.as_deref() {
            None | Some("us-east-1") => String::new(),
            Some(region) => format!(
                "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
                 <LocationConstraint>{region}</LocationConstraint></CreateBucketConfiguration>"
            ),
        };
        let headers =
            self.bucket.sign_headers("PUT", &url, &[], &sha256_hex(body.as_bytes()), SystemTime::now()).await?;
        match self.send(self.client.put(&url).body(body), headers).await {
            Err(TransferError::Refused { status: 409, body }) if body.contains("BucketAlreadyOwnedByYou") => Ok(()),
            other => other.map(drop),
        }
    }

    /// Sends `request` with the signature's `headers`; a non-2xx answer is refused, with its body.
    async fn send(
        &self,
        mut request: outbound::RequestBuilder,
        headers: Vec<(String, String)>,
    ) -> Result<Vec<u8>, TransferError> {
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let mut response = request.send().await.map_err(|err| TransferError::Unreachable(err.to_string()))?;
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|err| TransferError::Unreachable(err.to_string()))? {
            body.extend_from_slice(&chunk);
        }
        let status = response.status();
        if status.is_success() {
            Ok(body)
        } else {
            Err(TransferError::Refused { status: status.as_u16(), body: String::from_utf8_lossy(&body).into_owned() })
        }
    }
}
