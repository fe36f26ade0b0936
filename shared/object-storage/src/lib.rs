//! S3 objects without `aws-sdk-s3`: a function presigns GETs (query-string SigV4, computed
//! locally: no call, nothing at init), and tools (admin CLI, dev server, tests) send signed PUTs
//! through the project's outbound client (feature `transfer`). The generated S3 client would add
//! megabytes to a function that needs one signature.
//!
//! Addressing: with an endpoint set (`AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`: moto,
//! LocalStack) path-style, `{endpoint}/{bucket}/{key}`, which local stacks need; otherwise S3's
//! regional virtual-hosted endpoint, `https://{bucket}.s3.{region}.amazonaws.com/{key}` (the
//! commercial partition; a stack's generated bucket names are DNS-compatible).

#[cfg(feature = "transfer")]
pub mod transfer;

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sigv4::http_request::{
    PercentEncodingMode, SignableBody, SignableRequest, SignatureLocation, SigningSettings, UriPathNormalizationMode,
    sign,
};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use std::time::{Duration, SystemTime};

/// Longest validity SigV4 allows a presigned URL (7 days).
pub const MAX_PRESIGN_EXPIRY: Duration = Duration::from_secs(7 * 24 * 3600);

/// What S3's URI encoding leaves as is: the unreserved characters (RFC 3986).
const S3_ENCODE: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// A bucket, and how requests to it are addressed and signed.
#[derive(Debug, Clone)]
pub struct Bucket {
    name: String,
    /// The URL its keys are appended to (after a `/`).
    base_url: String,
    region: Option<String>,
    credentials: Option<SharedCredentialsProvider>,
}

/// Why a request could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum SigningError {
    #[error("S3 requests need a region (AWS_REGION)")]
    NoRegion,
    #[error("S3 requests need credentials")]
    NoCredentials,
    #[error("credentials: {0}")]
    Credentials(String),
    #[error("signing: {0}")]
    Signing(String),
}

/// A presigned GET: its URL and the instant it stops working.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresignedUrl {
    pub url: String,
    pub expires_at: SystemTime,
}

impl Bucket {
    /// The bucket `name` as `config` reaches S3 (its endpoint, region and credentials).
    pub fn new(name: impl Into<String>, config: &aws_env::SdkConfig) -> Self {
        let name = name.into();
        let region = config.region().map(ToString::to_string);
        let base_url = match aws_env::service_endpoint(config, "S3") {
            Some(endpoint) => format!("{}/{name}", endpoint.trim_end_matches('/')),
            None => format!("https://{name}.s3.{}.amazonaws.com", region.as_deref().unwrap_or("us-east-1")),
        };
        Self { name, base_url, region, credentials: config.credentials_provider() }
    }

    /// The bucket's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The bucket's own URL (path-style: the endpoint and the name; else its virtual host).
    pub fn url(&self) -> &str {
        &self.base_url
    }

    /// The unsigned URL of `key`, each of its characters encoded as S3 encodes them (`/` kept).
    pub fn object_url(&self, key: &str) -> String {
        let path: Vec<String> =
            key.split('/').map(|segment| utf8_percent_encode(segment, S3_ENCODE).to_string()).collect();
        format!("{}/{}", self.base_url, path.join("/"))
    }

    /// A URL that GETs `key` without other credentials until `signed_at + expires_in`
    /// (query-string SigV4, `UNSIGNED-PAYLOAD`; at most [`MAX_PRESIGN_EXPIRY`]). With temporary
    /// credentials (a Lambda role's) it also stops working when they expire.
    pub async fn presign_get(
        &self,
        key: &str,
        signed_at: SystemTime,
        expires_in: Duration,
    ) -> Result<PresignedUrl, SigningError> {
        let expires_in = expires_in.min(MAX_PRESIGN_EXPIRY);
        let url = self.object_url(key);
        let mut settings = s3_settings();
        settings.signature_location = SignatureLocation::QueryParams;
        settings.expires_in = Some(expires_in);
        let request = SignableRequest::new("GET", &url, std::iter::empty(), SignableBody::UnsignedPayload)
            .map_err(|err| SigningError::Signing(err.to_string()))?;
        let query = self
            .signed(request, settings, signed_at)
            .await?
            .into_iter()
            .map(|(name, value)| format!("{name}={}", utf8_percent_encode(&value, S3_ENCODE)))
            .collect::<Vec<_>>()
            .join("&");
        Ok(PresignedUrl { url: format!("{url}?{query}"), expires_at: signed_at + expires_in })
    }

    /// The headers that sign a request to `url` (of this bucket) whose body's SHA-256 is
    /// `payload_sha256` (lowercase hex), `headers` signed with it: `authorization`,
    /// `x-amz-date`, `x-amz-content-sha256` and, with temporary credentials, `x-amz-security-token`.
    pub async fn sign_headers(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        payload_sha256: &str,
        signed_at: SystemTime,
    ) -> Result<Vec<(String, String)>, SigningError> {
        let request = SignableRequest::new(
            method,
            url,
            headers.iter().copied(),
            SignableBody::Precomputed(payload_sha256.to_owned()),
        )
        .map_err(|err| SigningError::Signing(err.to_string()))?;
        let mut settings = s3_settings();
        settings.payload_checksum_kind = aws_sigv4::http_request::PayloadChecksumKind::XAmzSha256;
        self.signed(request, settings, signed_at).await
    }

    /// Signs `request`: headers or query parameters, as `settings` place them.
    async fn signed(
        &self,
        request: SignableRequest<'_>,
        settings: SigningSettings,
        signed_at: SystemTime,
    ) -> Result<Vec<(String, String)>, SigningError> {
        let region = self.region.as_deref().ok_or(SigningError::NoRegion)?;
        let provider = self.credentials.as_ref().ok_or(SigningError::NoCredentials)?;
        let credentials =
            provider.provide_credentials().await.map_err(|err| SigningError::Credentials(err.to_string()))?;
        let identity = credentials.into();
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(region)
            .name("s3")
            .time(signed_at)
            .settings(settings)
            .build()
            .map_err(|err| SigningError::Signing(err.to_string()))?
            .into();
        let (instructions, _) =
            sign(request, &params).map_err(|err| SigningError::Signing(err.to_string()))?.into_parts();
        let mut out: Vec<(String, String)> =
            instructions.headers().map(|(name, value)| (name.to_owned(), value.to_owned())).collect();
        out.extend(instructions.params().iter().map(|(name, value)| ((*name).to_owned(), value.to_string())));
        Ok(out)
    }
}

/// S3's SigV4 rules: the path is signed as sent (encoded once, never normalized).
fn s3_settings() -> SigningSettings {
    let mut settings = SigningSettings::default();
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    settings
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_credential_types::Credentials;

    fn config(endpoint: Option<&str>) -> aws_env::SdkConfig {
        let mut builder = aws_env::SdkConfig::builder().region(aws_env::Region::new("eu-west-1")).credentials_provider(
            SharedCredentialsProvider::new(Credentials::new(
                "ANOTREAL",
                "notrealrnrELgWzOk3IfjzDKtFBhDby",
                Some("notarealsessiontoken".into()),
                None,
                "test",
            )),
        );
        builder.set_endpoint_url(endpoint.map(str::to_owned));
        builder.build()
    }

    #[test]
    fn a_local_endpoint_is_path_style_and_aws_is_the_regional_virtual_host() {
        let local = Bucket::new("b", &config(Some("http://127.0.0.1:5050/")));
        assert_eq!(local.object_url("recordings/1/2/a.mp3"), "http://127.0.0.1:5050/b/recordings/1/2/a.mp3");
        let aws = Bucket::new("b", &config(None));
        assert_eq!(
            aws.object_url("recordings/x y+é.mp3"),
            "https://b.s3.eu-west-1.amazonaws.com/recordings/x%20y%2B%C3%A9.mp3"
        );
    }

    #[tokio::test]
    async fn a_presigned_get_carries_its_expiry_and_the_session_token() {
        let bucket = Bucket::new("b", &config(None));
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let presigned = bucket.presign_get("recordings/k.mp3", at, Duration::from_secs(300)).await.unwrap();
        assert_eq!(presigned.expires_at, at + Duration::from_secs(300));
        let url = presigned.url;
        assert!(url.starts_with("https://b.s3.eu-west-1.amazonaws.com/recordings/k.mp3?"), "{url}");
        for part in [
            "X-Amz-Algorithm=AWS4-HMAC-SHA256",
            "X-Amz-Credential=ANOTREAL%2F20270115%2Feu-west-1%2Fs3%2Faws4_request",
            "X-Amz-Date=20270115T080000Z",
            "X-Amz-Expires=300",
            "X-Amz-SignedHeaders=host",
            "X-Amz-Security-Token=notarealsessiontoken",
            "X-Amz-Signature=",
        ] {
            assert!(url.contains(part), "{part} in {url}");
        }
        let capped = bucket.presign_get("k", at, Duration::from_secs(30 * 24 * 3600)).await.unwrap();
        assert_eq!(capped.expires_at, at + MAX_PRESIGN_EXPIRY);
    }

    #[tokio::test]
    async fn without_region_or_credentials_nothing_is_signed() {
        let bare = Bucket::new("b", &aws_env::SdkConfig::builder().build());
        let at = SystemTime::UNIX_EPOCH;
        assert!(matches!(bare.presign_get("k", at, Duration::from_secs(1)).await, Err(SigningError::NoRegion)));
    }

    proptest::proptest! {
        #[test]
        fn any_key_makes_a_url_and_keeps_its_slashes(key in "\\PC{0,64}") {
            let url = Bucket::new("b", &config(Some("http://127.0.0.1:1"))).object_url(&key);
            let path = url.strip_prefix("http://127.0.0.1:1/b/").unwrap();
            proptest::prop_assert_eq!(path.matches('/').count(), key.matches('/').count());
            proptest::prop_assert!(path.bytes().all(|b| b.is_ascii_graphic()));
        }
    }
}
