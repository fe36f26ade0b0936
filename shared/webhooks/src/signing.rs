//! Standard Webhooks signatures: secrets are `whsec_` + base64 of 24 random bytes; a delivery is
//! signed as `v1,` + base64(HMAC-SHA256(secret bytes, "{webhook-id}.{webhook-timestamp}.{body}")).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Prefix of every endpoint secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// A new endpoint secret (192 random bits).
pub fn new_secret() -> String {
    let mut bytes = [0u8; 24];
    // The OS generator only fails on a broken system; a predictable secret must never be issued.
    getrandom::fill(&mut bytes).expect("the operating system's random generator is unavailable");
    format!("{SECRET_PREFIX}{}", STANDARD.encode(bytes))
}

/// The `webhook-signature` entry of one secret: `v1,{base64}`. `None` when the secret is not a
/// `whsec_` base64 secret.
pub fn sign(secret: &str, message_id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
    let key = STANDARD.decode(secret.strip_prefix(SECRET_PREFIX)?).ok()?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
    mac.update(message_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Some(format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes())))
}

/// The `webhook-signature` header: one signature per secret, space-separated (during a rotation
/// both the new and the previous secret sign).
pub fn signature_header<'a>(
    secrets: impl IntoIterator<Item = &'a str>,
    message_id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    secrets.into_iter().filter_map(|secret| sign(secret, message_id, timestamp, body)).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_webhooks_reference_vector() {
        let signature = sign(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(signature.as_deref(), Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="));
    }

    #[test]
    fn new_secrets_are_distinct_and_usable() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert!(a.starts_with(SECRET_PREFIX) && a.len() == SECRET_PREFIX.len() + 32);
        let header = signature_header([a.as_str(), b.as_str()], "msg_1", 1, b"{}");
        assert_eq!(header.split(' ').count(), 2);
        assert!(sign("not-a-secret", "msg_1", 1, b"{}").is_none());
    }
}
