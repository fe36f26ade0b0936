//! External applications, their client credentials and the access tokens they obtain.
//!
//! An access token reads `{client_id}.{256 random bits}`. Only its SHA-256 is stored. Carrying the
//! client id lets one BatchGetItem fetch the token and its application together, so a deactivated
//! application's tokens stop working at once without a second round trip.

use chrono::{DateTime, Utc};
use credentials::{MAX_PRESENTED_ID_BYTES, Peppers, SECRET_BYTES, Verification, random_string, token_digest};
use serde::{Deserialize, Serialize};

/// The one scope this API grants.
pub const SCOPE: &str = "meetings:read";

/// An application allowed to read the meetings of its linked organizations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExternalApp {
    pub client_id: String,
    pub name: String,
    /// Keyed hash of the client secret; the secret itself is never stored.
    pub secret_hash: String,
    /// Id of the pepper `secret_hash` was made with (absent on applications created before
    /// pepper ids were recorded); lets an operator see who still depends on a previous pepper.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pepper_id: Option<String>,
    pub active: bool,
    pub organization_ids: Vec<i64>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Incremented on every change; guards concurrent updates.
    pub revision: u64,
}

/// A stored access token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccessTokenRecord {
    pub token_hash: String,
    pub client_id: String,
    pub scope: String,
    pub issued_at: i64,
    /// Unix seconds; also the table's TTL attribute.
    pub expires_at: i64,
}

/// A bearer token as handed to the client, with its record.
pub struct IssuedToken {
    pub access_token: String,
    pub record: AccessTokenRecord,
}

/// What a valid bearer token grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessGrant {
    pub client_id: String,
    pub organization_ids: Vec<i64>,
}

/// Why a bearer token was refused (for logs; callers all get the same 401).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BearerRejection {
    Malformed,
    Unknown,
    Expired,
    InactiveApplication,
}

impl ExternalApp {
    /// A new active application and its client secret, which the caller shows once.
    pub fn create(name: &str, organization_ids: Vec<i64>, peppers: &Peppers, now: DateTime<Utc>) -> (Self, String) {
        let client_secret = random_string(SECRET_BYTES);
        let hashed = peppers.hash(&client_secret);
        let app = Self {
            client_id: random_string(16),
            name: name.to_owned(),
            secret_hash: hashed.hash,
            pepper_id: Some(hashed.pepper_id),
            active: true,
            organization_ids,
            created_at: now,
            updated_at: now,
            revision: 1,
        };
        (app, client_secret)
    }

    /// Whether `secret` is this application's client secret (constant-time), and whether its
    /// stored hash should move to the current pepper.
    pub fn verify_secret(&self, peppers: &Peppers, secret: &str) -> Verification {
        peppers.verify(secret, &self.secret_hash)
    }

    /// Marks a change, for `AppStore::replace`.
    pub fn touch(&mut self, now: DateTime<Utc>) {
        self.updated_at = now;
        self.revision += 1;
    }
}

/// Issues a token for `client_id` valid for `lifetime_seconds` from `now`.
pub fn issue_token(client_id: &str, lifetime_seconds: i64, now: DateTime<Utc>) -> IssuedToken {
    let access_token = format!("{client_id}.{}", random_string(SECRET_BYTES));
    let record = AccessTokenRecord {
        token_hash: token_digest(&access_token),
        client_id: client_id.to_owned(),
        scope: SCOPE.to_owned(),
        issued_at: now.timestamp(),
        expires_at: now.timestamp() + lifetime_seconds,
    };
    IssuedToken { access_token, record }
}

/// The client id a token claims to belong to, if it has the token shape at all (a client id
/// longer than `MAX_PRESENTED_ID_BYTES` has not).
pub fn token_client_id(token: &str) -> Option<&str> {
    let (client_id, secret) = token.split_once('.')?;
    (!client_id.is_empty() && client_id.len() <= MAX_PRESENTED_ID_BYTES && !secret.is_empty()).then_some(client_id)
}

/// The id of `client_id`'s rate-limit bucket in `RateLimitsTable` (shared with the backend's
/// API keys, whose ids are base64url and so never contain the prefix's ':').
pub fn rate_limit_bucket(client_id: &str) -> String {
    format!("client:{client_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_carry_their_client_id_and_expiry() {
        let now = DateTime::from_timestamp(1_000_000, 0).unwrap();
        let issued = issue_token("client-1", 10800, now);
        assert_eq!(token_client_id(&issued.access_token), Some("client-1"));
        assert_eq!(issued.record.expires_at, 1_000_000 + 10800);
        assert_eq!(issued.record.token_hash, token_digest(&issued.access_token));
        assert_eq!(issued.record.scope, "meetings:read");
    }

    #[test]
    fn malformed_tokens_have_no_client_id() {
        for token in ["", "abc", ".abc", "abc.", "."] {
            assert_eq!(token_client_id(token), None, "{token:?}");
        }
        let longest = "c".repeat(MAX_PRESENTED_ID_BYTES);
        assert_eq!(token_client_id(&format!("{longest}.secret")), Some(longest.as_str()));
        assert_eq!(token_client_id(&format!("{longest}c.secret")), None);
    }

    #[test]
    fn created_apps_verify_their_secret_only() {
        let peppers = Peppers::parse("p").unwrap();
        let (app, secret) = ExternalApp::create("Acme", vec![1], &peppers, Utc::now());
        assert_eq!(app.verify_secret(&peppers, &secret), Verification::Match);
        assert_eq!(app.verify_secret(&peppers, "wrong"), Verification::Mismatch);
        assert!(!app.secret_hash.contains(&secret));
        assert_eq!(app.pepper_id.as_deref(), Some(peppers.current().id()));
    }

    #[test]
    fn an_app_hashed_with_the_previous_pepper_verifies_and_offers_an_upgrade() {
        let old = Peppers::parse("old").unwrap();
        let (app, secret) = ExternalApp::create("Acme", vec![1], &old, Utc::now());
        let rotated = Peppers::parse(r#"{"current": "new", "previous": "old"}"#).unwrap();
        let Verification::MatchUnderPrevious { upgrade } = app.verify_secret(&rotated, &secret) else {
            panic!("expected a match under the previous pepper")
        };
        assert_eq!(upgrade.pepper_id, rotated.current().id());
        assert!(rotated.current().verify(&secret, &upgrade.hash));
        assert_eq!(app.verify_secret(&Peppers::parse("new").unwrap(), &secret), Verification::Mismatch);
    }

    #[test]
    fn apps_stored_before_pepper_ids_still_read() {
        let (app, _) = ExternalApp::create("Acme", vec![1], &Peppers::parse("p").unwrap(), Utc::now());
        let mut item: storage::Item = serde_dynamo::to_item(app).unwrap();
        item.remove("pepper_id");
        let app: ExternalApp = serde_dynamo::from_item(item).unwrap();
        assert_eq!(app.pepper_id, None);
    }
}
