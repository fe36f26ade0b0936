//! Secrets bound to the origin they were stored for.
//!
//! A provider key or an MCP secret header is sent to one server. Stored alone, it would follow
//! the record's URL wherever a later update points it; so it is stored together with the origin
//! (scheme, host, port) it was given for, and read back only for that origin. An update that
//! moves the URL to another origin must send the secret again (the API answers 422 otherwise),
//! and a secret read for another origin is refused even if a race let such an update through.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The origin of an absolute URL, as `scheme://host[:port]` with default ports left out.
pub fn origin_of(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    let origin = parsed.origin();
    origin.is_tuple().then(|| origin.ascii_serialization())
}

/// Why a stored secret is not given out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretRefused {
    /// The secret was stored for another origin than the one it would be sent to now.
    #[error("the secret was stored for {stored}, not for {wanted}; send it again with the new address")]
    OtherOrigin { stored: String, wanted: String },
    /// The stored value is not in the stored form (written by hand, or an older format).
    #[error("the stored secret cannot be read; send it again")]
    Unreadable,
}

/// The stored form: the origin beside the secret.
#[derive(Serialize, Deserialize)]
struct Stored<O, T> {
    origin: O,
    value: T,
}

/// The stored form of `value`, bound to `origin`.
pub fn encode<T: Serialize>(origin: &str, value: &T) -> String {
    serde_json::to_string(&Stored { origin, value }).unwrap_or_default()
}

/// The value `encode` stored, if it was stored for `origin`.
pub fn decode_for<T: DeserializeOwned>(stored: &str, origin: &str) -> Result<T, SecretRefused> {
    let stored: Stored<String, T> = serde_json::from_str(stored).map_err(|_| SecretRefused::Unreadable)?;
    if stored.origin != origin {
        return Err(SecretRefused::OtherOrigin { stored: stored.origin, wanted: origin.to_owned() });
    }
    Ok(stored.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_compare_scheme_host_and_port() {
        assert_eq!(origin_of("https://api.example.com/v1?x=1").as_deref(), Some("https://api.example.com"));
        assert_eq!(origin_of("https://API.example.com:443/other"), origin_of("https://api.example.com/v1"));
        assert_ne!(origin_of("http://api.example.com/v1"), origin_of("https://api.example.com/v1"));
        assert_ne!(origin_of("https://api.example.com:8443/v1"), origin_of("https://api.example.com/v1"));
        assert_eq!(origin_of("not a url"), None);
        assert_eq!(origin_of("data:text/plain,x"), None);
    }

    #[test]
    fn a_secret_is_given_out_only_for_its_origin() {
        let stored = encode("https://api.example.com", &"sk-1".to_owned());
        assert_eq!(decode_for::<String>(&stored, "https://api.example.com").as_deref(), Ok("sk-1"));
        assert_eq!(
            decode_for::<String>(&stored, "https://evil.example.net"),
            Err(SecretRefused::OtherOrigin {
                stored: "https://api.example.com".into(),
                wanted: "https://evil.example.net".into()
            })
        );
        assert_eq!(decode_for::<String>("sk-legacy", "https://api.example.com"), Err(SecretRefused::Unreadable));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Whatever is stored, a read is the value for its own origin or a refusal, never a
        /// panic, and never the value for another origin.
        #[test]
        fn reads_are_bound_to_their_origin(stored in "\\PC{0,60}", origin in "https?://[a-z]{1,8}(:[0-9]{1,5})?", value in "\\PC{0,20}") {
            let _ = decode_for::<String>(&stored, &origin);
            let written = encode(&origin, &value);
            proptest::prop_assert_eq!(decode_for::<String>(&written, &origin), Ok(value));
            let other = format!("{origin}x");
            let refused = matches!(decode_for::<String>(&written, &other), Err(SecretRefused::OtherOrigin { .. }));
            proptest::prop_assert!(refused);
            let _ = origin_of(&stored);
        }
    }
}
