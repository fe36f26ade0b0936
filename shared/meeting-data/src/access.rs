//! External applications, their client credentials and the access tokens they obtain.
//!
//! An access token reads `{client_id}.{256 random bits}`. Only its SHA-256 is stored. Carrying the
//! client id lets one BatchGetItem fetch the token and its application together, so a deactivated
//! application's tokens stop working at once without a second round trip.

use chrono::{DateTime, Utc};
use credentials::{MAX_PRESENTED_ID_BYTES, Peppers, SECRET_BYTES, Verification, random_string, token_digest};
use serde::{Deserialize, Serialize};

/// The scope every application has: reading the meetings of its linked organizations.
pub const SCOPE: &str = "meetings:read";

/// The scope of managing the application's own webhook endpoints (`/api/v1/external/webhooks/`).
pub const WEBHOOKS_SCOPE: &str = "webhooks:manage";

/// Every scope an application can be granted, `SCOPE` always.
pub const SCOPES: [&str; 2] = [SCOPE, WEBHOOKS_SCOPE];

/// The scopes of a space-separated list (RFC 6749 §3.3), each once, in `SCOPES` order; `Err`
/// names the first that is not one of `SCOPES`.
pub fn parse_scopes(text: &str) -> Result<Vec<&'static str>, String> {
    let mut scopes = Vec::new();
    for word in text.split(' ').filter(|word| !word.is_empty()) {
        let Some(known) = SCOPES.iter().find(|scope| **scope == word) else { return Err(word.to_owned()) };
        if !scopes.contains(known) {
            scopes.push(*known);
        }
    }
    scopes.sort_by_key(|scope| SCOPES.iter().position(|known| known == scope));
    Ok(scopes)
}

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
    /// Scopes granted besides `SCOPE`, which every application has (absent on applications
    /// created before scopes; a stored name this version does not know grants nothing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_scopes: Vec<String>,
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
    /// What the token was issued for and the application still has.
    pub scopes: Vec<&'static str>,
}

impl AccessGrant {
    /// Whether the grant includes `scope`.
    pub fn allows(&self, scope: &str) -> bool {
        self.scopes.contains(&scope)
    }
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
            extra_scopes: Vec::new(),
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

    /// Whether the application has been granted `scope`.
    pub fn has_scope(&self, scope: &str) -> bool {
        scope == SCOPE || self.extra_scopes.iter().any(|granted| granted == scope)
    }

    /// The scopes it has been granted, in `SCOPES` order.
    pub fn scopes(&self) -> Vec<&'static str> {
        SCOPES.into_iter().filter(|scope| self.has_scope(scope)).collect()
    }

    /// The scopes of a token issued now for `requested`, and of a request made with it:
    /// those of `requested` the application still has.
    pub fn granted(&self, requested: &str) -> Vec<&'static str> {
        parse_scopes(requested).unwrap_or_default().into_iter().filter(|scope| self.has_scope(scope)).collect()
    }

    /// Marks a change, for `AppStore::replace`.
    pub fn touch(&mut self, now: DateTime<Utc>) {
        self.updated_at = now;
        self.revision += 1;
    }
}

/// Issues a token for `client_id` and `scopes` (space-separated) valid for `lifetime_seconds`
/// from `now`.
pub fn issue_token(client_id: &str, scopes: &str, lifetime_seconds: i64, now: DateTime<Utc>) -> IssuedToken {
    let access_token = format!("{client_id}.{}", random_string(SECRET_BYTES));
    let record = AccessTokenRecord {
        token_hash: token_digest(&access_token),
        client_id: client_id.to_owned(),
        scope: scopes.to_owned(),
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
        let issued = issue_token("client-1", SCOPE, 10800, now);
        assert_eq!(token_client_id(&issued.access_token), Some("client-1"));
        assert_eq!(issued.record.expires_at, 1_000_000 + 10800);
        assert_eq!(issued.record.token_hash, token_digest(&issued.access_token));
        assert_eq!(issued.record.scope, "meetings:read");
    }

    #[test]
    fn scopes_parse_once_each_in_a_fixed_order() {
        assert_eq!(parse_scopes("webhooks:manage  meetings:read webhooks:manage"), Ok(vec![SCOPE, WEBHOOKS_SCOPE]));
        assert_eq!(parse_scopes(""), Ok(vec![]));
        assert_eq!(parse_scopes("meetings:read meetings:write"), Err("meetings:write".to_owned()));
    }

    proptest::proptest! {
        /// Any `scope` parameter parses without panicking, into known scopes only, or names a
        /// word of it that is not one.
        #[test]
        fn any_scope_parameter_parses_or_names_its_unknown_word(text in ".{0,64}") {
            match parse_scopes(&text) {
                Ok(scopes) => proptest::prop_assert!(scopes.iter().all(|scope| SCOPES.contains(scope))),
                Err(word) => proptest::prop_assert!(text.split(' ').any(|part| part == word) && !SCOPES.contains(&word.as_str())),
            }
        }
    }

    #[test]
    fn a_grant_is_what_was_asked_and_the_application_still_has() {
        let (mut app, _) = ExternalApp::create("Acme", vec![1], &Peppers::parse("p").unwrap(), Utc::now());
        assert_eq!(app.scopes(), [SCOPE]);
        assert_eq!(app.granted("meetings:read webhooks:manage"), [SCOPE]);
        app.extra_scopes = vec![WEBHOOKS_SCOPE.to_owned(), "scope:of-a-later-version".to_owned()];
        assert_eq!(app.scopes(), [SCOPE, WEBHOOKS_SCOPE]);
        assert_eq!(app.granted("webhooks:manage"), [WEBHOOKS_SCOPE]);
        assert_eq!(app.granted("unknown"), Vec::<&str>::new());
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
