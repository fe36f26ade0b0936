//! Secret generation and keyed hashing for client secrets, API keys and tokens.
//!
//! Secrets are generated here, shown to their owner once, and stored only as a keyed hash
//! (HMAC-SHA256 with a pepper kept in Secrets Manager). The pepper secret may hold a previous
//! pepper besides the current one, so the pepper rotates without invalidating credentials
//! (`pepper`). Bearer tokens are random enough (256 bits) that a plain SHA-256 is a
//! sufficient lookup key.

mod pepper;
mod source;

pub use pepper::{HashedWith, KeyedHash, Pepper, Peppers, Verification};
pub use source::{PepperSource, REFRESH_INTERVAL, SecretVersion};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

/// Number of random bytes in every generated secret or token (256 bits).
pub const SECRET_BYTES: usize = 32;

/// The longest API key id or client id a request may present, in bytes. Issued ids are 16 (API
/// keys) and 22 (client ids) characters; DynamoDB refuses a partition key over 2,048 bytes with
/// an error, so a longer id is refused as unknown before anything is read.
pub const MAX_PRESENTED_ID_BYTES: usize = 128;

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

/// Why credential material could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("the pepper secret is empty")]
    EmptyPepper,
    #[error("the pepper secret is malformed: {0}")]
    MalformedPepperSecret(String),
    #[error("Secrets Manager call for the pepper secret failed: {0}")]
    SecretsManager(String),
    #[error("{0}")]
    RotationStep(&'static str),
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

            #[test]
            fn any_pepper_secret_value_parses_or_is_an_error(
                value in prop_oneof![
                    any::<String>(),
                    "\\{[ -~]{0,40}\\}",
                    ("[a-z]{0,8}", "[ -~]{0,12}", "[ -~]{0,12}").prop_map(|(field, one, two)| {
                        serde_json::json!({ "current": one, field: two }).to_string()
                    }),
                ],
            ) {
                match Peppers::parse(&value) {
                    Ok(peppers) => {
                        let written = peppers.to_secret_string().expect("parsed text is UTF-8");
                        prop_assert!(Peppers::parse(&written).expect("written secrets parse").same_as(&peppers));
                    }
                    Err(CredentialsError::EmptyPepper | CredentialsError::MalformedPepperSecret(_)) => {}
                    Err(other) => prop_assert!(false, "unexpected error {other:?}"),
                }
            }

            #[test]
            fn during_a_rotation_only_the_hashed_secret_matches(
                secret in any::<String>(),
                other in any::<String>(),
                under_previous in any::<bool>(),
            ) {
                let old = Peppers::single(Pepper::new("old").expect("a pepper"));
                let rotating = old.staged(Pepper::generate()).and_then(|staged| staged.promoted()).expect("rotation");
                let stored = if under_previous { old.hash(&secret) } else { rotating.hash(&secret) };
                let verified = rotating.verify(&secret, &stored.hash);
                prop_assert!(verified.is_match());
                prop_assert_eq!(matches!(verified, Verification::MatchUnderPrevious { .. }), under_previous);
                prop_assert_eq!(rotating.verify(&other, &stored.hash).is_match(), other == secret);
            }
        }
    }
}
