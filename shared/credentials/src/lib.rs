//! Secret generation and keyed hashing for client secrets, API keys and tokens.
//!
//! Secrets are generated here, shown to their owner once, and stored only as a keyed hash
//! (HMAC-SHA256 with a pepper kept in Secrets Manager). Bearer tokens are random enough
//! (256 bits) that a plain SHA-256 is a sufficient lookup key.

use aws_sdk_secretsmanager::Client as SecretsClient;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::fmt;
use tokio::sync::OnceCell;

type HmacSha256 = Hmac<Sha256>;

/// Number of random bytes in every generated secret or token (256 bits).
pub const SECRET_BYTES: usize = 32;

/// Returns `bytes` random bytes from the operating system, base64url-encoded without padding.
pub fn random_string(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    // The OS random source failing is not recoverable and not input-derived.
    getrandom::fill(&mut buf).expect("operating system random source unavailable");
    URL_SAFE_NO_PAD.encode(buf)
}

/// SHA-256 of `value`, base64url-encoded: the storage key of a high-entropy bearer token.
pub fn token_digest(value: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(value.as_bytes()))
}

/// The server-side key of every keyed hash. Its bytes never appear in logs.
#[derive(Clone)]
pub struct Pepper(Vec<u8>);

impl Pepper {
    /// Wraps pepper material; it must not be empty.
    pub fn new(material: impl Into<Vec<u8>>) -> Result<Self, CredentialsError> {
        let material = material.into();
        if material.is_empty() {
            return Err(CredentialsError::EmptyPepper);
        }
        Ok(Self(material))
    }

    /// Keyed hash of a secret, base64url-encoded, for storage.
    pub fn hash(&self, secret: &str) -> String {
        URL_SAFE_NO_PAD.encode(self.mac(secret).finalize().into_bytes())
    }

    /// Whether `secret` matches a stored keyed hash, compared in constant time.
    pub fn verify(&self, secret: &str, stored_hash: &str) -> bool {
        let Ok(expected) = URL_SAFE_NO_PAD.decode(stored_hash) else {
            return false;
        };
        self.mac(secret).verify_slice(&expected).is_ok()
    }

    fn mac(&self, secret: &str) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC accepts keys of any length");
        mac.update(secret.as_bytes());
        mac
    }
}

impl fmt::Debug for Pepper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Pepper(<redacted>)")
    }
}

/// Loads the pepper from Secrets Manager on first use and keeps it for the container's life,
/// so cold starts pay nothing for it and warm requests make no extra call.
pub struct PepperSource {
    client: SecretsClient,
    secret_id: String,
    pepper: OnceCell<Pepper>,
}

impl PepperSource {
    /// A source reading the secret `secret_id` (name or ARN) with `client`.
    pub fn new(client: SecretsClient, secret_id: impl Into<String>) -> Self {
        Self { client, secret_id: secret_id.into(), pepper: OnceCell::new() }
    }

    /// The pepper, fetched once.
    pub async fn get(&self) -> Result<&Pepper, CredentialsError> {
        self.pepper
            .get_or_try_init(|| async {
                let output = self.client.get_secret_value().secret_id(&self.secret_id).send().await.map_err(|err| {
                    CredentialsError::SecretsManager(
                        aws_sdk_secretsmanager::error::DisplayErrorContext(err).to_string(),
                    )
                })?;
                let material = output.secret_string().ok_or(CredentialsError::EmptyPepper)?;
                Pepper::new(material.as_bytes())
            })
            .await
    }
}

/// Why credential material could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("the pepper secret is empty")]
    EmptyPepper,
    #[error("reading the pepper from Secrets Manager failed: {0}")]
    SecretsManager(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_strings_are_long_and_distinct() {
        let a = random_string(SECRET_BYTES);
        let b = random_string(SECRET_BYTES);
        assert_eq!(a.len(), 43);
        assert_ne!(a, b);
    }

    #[test]
    fn keyed_hash_verifies_only_the_right_secret_and_pepper() {
        let pepper = Pepper::new("pepper-one").unwrap();
        let stored = pepper.hash("s3cret");
        assert!(pepper.verify("s3cret", &stored));
        assert!(!pepper.verify("s3cret!", &stored));
        assert!(!Pepper::new("pepper-two").unwrap().verify("s3cret", &stored));
        assert!(!pepper.verify("s3cret", "not base64 !!"));
    }

    #[test]
    fn empty_pepper_is_refused_and_debug_hides_material() {
        assert!(Pepper::new("").is_err());
        assert_eq!(format!("{:?}", Pepper::new("abc").unwrap()), "Pepper(<redacted>)");
    }

    #[test]
    fn token_digest_is_stable_sha256() {
        // SHA-256("abc"), base64url.
        assert_eq!(token_digest("abc"), "ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0");
    }

    mod properties {
        //! Property tests: a presented secret (an API key, a client secret) and a stored hash of
        //! any shape are compared without panicking, and only the hashed secret matches.

        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn any_presented_secret_is_verified_without_panicking(
                pepper in prop::collection::vec(any::<u8>(), 1..64),
                secret in any::<String>(),
                other in any::<String>(),
                stored in prop_oneof![any::<String>(), "[A-Za-z0-9_-]{43}"],
            ) {
                let pepper = Pepper::new(pepper).expect("a non-empty pepper");
                let hash = pepper.hash(&secret);
                prop_assert!(pepper.verify(&secret, &hash));
                prop_assert_eq!(pepper.verify(&other, &hash), other == secret);
                prop_assert_eq!(pepper.verify(&secret, &stored), stored == hash);
                prop_assert_eq!(token_digest(&secret).len(), 43);
            }
        }
    }
}
