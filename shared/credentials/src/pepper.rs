//! The pepper (the key of every keyed hash) and the secret that holds it during a rotation.
//!
//! The pepper secret is either today's plain string, the current pepper alone, or a JSON object:
//!
//! ```json
//! {"current": "<pepper>"}
//! {"current": "<pepper>", "next": "<pepper>"}
//! {"current": "<pepper>", "previous": "<pepper>"}
//! ```
//!
//! New hashes are always made with `current`. A presented secret is verified with `current`,
//! then `previous`, then `next`. A match under `previous` comes with the hash to store in place
//! of the old one, so a credential moves to the current pepper the first time it is used.
//! `next` is staged before it becomes current, so that every container accepts hashes made
//! with it before any container makes them (containers re-read the secret every few minutes,
//! not all at once). docs/operations.md, "Rotating the pepper", has the operator's steps.

use crate::CredentialsError;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::fmt;

type HmacSha256 = Hmac<Sha256>;

/// Number of bytes of a pepper's HMAC of [`PEPPER_ID_LABEL`] kept as its id (72 bits).
const PEPPER_ID_BYTES: usize = 9;
/// What a pepper's id is the HMAC of.
const PEPPER_ID_LABEL: &[u8] = b"pepper id";

/// The server-side key of every keyed hash. Its bytes never appear in logs.
#[derive(Clone)]
pub struct Pepper {
    material: Vec<u8>,
    id: String,
}

impl Pepper {
    /// Wraps pepper material; it must not be empty.
    pub fn new(material: impl Into<Vec<u8>>) -> Result<Self, CredentialsError> {
        let material = material.into();
        if material.is_empty() {
            return Err(CredentialsError::EmptyPepper);
        }
        let mut pepper = Self { material, id: String::new() };
        let mac = pepper.mac_bytes(PEPPER_ID_LABEL);
        pepper.id = URL_SAFE_NO_PAD.encode(&mac[..PEPPER_ID_BYTES]);
        Ok(pepper)
    }

    /// A new random pepper (256 bits, base64url text, so it can be written to the secret).
    pub fn generate() -> Self {
        Self::new(crate::random_string(crate::SECRET_BYTES)).expect("a generated pepper is not empty")
    }

    /// A short public name of this pepper, stored beside each hash made with it so an operator
    /// can count the credentials still hashed with a pepper. It is an HMAC of a fixed label,
    /// so it reveals nothing usable about the pepper.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Keyed hash of a secret, base64url-encoded, for storage.
    pub fn hash(&self, secret: &str) -> String {
        URL_SAFE_NO_PAD.encode(self.mac_bytes(secret.as_bytes()))
    }

    /// Whether `secret` matches a stored keyed hash, compared in constant time.
    pub fn verify(&self, secret: &str, stored_hash: &str) -> bool {
        let Ok(expected) = URL_SAFE_NO_PAD.decode(stored_hash) else {
            return false;
        };
        self.mac(secret.as_bytes()).verify_slice(&expected).is_ok()
    }

    fn mac(&self, message: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.material).expect("HMAC accepts keys of any length");
        mac.update(message);
        mac
    }

    fn mac_bytes(&self, message: &[u8]) -> Vec<u8> {
        self.mac(message).finalize().into_bytes().to_vec()
    }

    fn text(&self) -> Result<&str, CredentialsError> {
        std::str::from_utf8(&self.material)
            .map_err(|_| CredentialsError::MalformedPepperSecret("a pepper to write must be UTF-8 text".into()))
    }
}

impl fmt::Debug for Pepper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Pepper(<redacted>)")
    }
}

/// A hash to store and the id of the pepper that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedHash {
    pub hash: String,
    pub pepper_id: String,
}

/// The outcome of checking a presented secret against its stored hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verification {
    /// The secret does not match under any pepper.
    Mismatch,
    /// It matches under the current pepper (or the staged next one): nothing to do.
    Match,
    /// It matches only under the previous pepper. Store `upgrade` in place of the old hash
    /// (conditionally on the old hash) so the credential survives the previous pepper's removal.
    MatchUnderPrevious { upgrade: KeyedHash },
}

impl Verification {
    /// Whether the secret is authentic.
    pub fn is_match(&self) -> bool {
        !matches!(self, Self::Mismatch)
    }
}

/// Which of the secret's peppers a stored hash was made with, by its recorded pepper id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HashedWith {
    Current,
    Previous,
    Next,
    /// No pepper id was stored with the hash (made before pepper ids were recorded).
    Unrecorded,
    /// A pepper the secret no longer holds: the credential cannot be verified any more.
    Retired,
}

/// The peppers the pepper secret holds: the current one, and during a rotation either the
/// next one (staged) or the previous one (being retired).
#[derive(Debug, Clone)]
pub struct Peppers {
    current: Pepper,
    previous: Option<Pepper>,
    next: Option<Pepper>,
}

impl Peppers {
    /// Only a current pepper (no rotation under way).
    pub fn single(current: Pepper) -> Self {
        Self { current, previous: None, next: None }
    }

    /// Reads the pepper secret's value: a JSON object (see the module docs) when its first
    /// non-blank character is `{`, otherwise the whole value is the current pepper, as before.
    /// Error messages never quote the value.
    pub fn parse(secret: &str) -> Result<Self, CredentialsError> {
        if !secret.trim_start().starts_with('{') {
            return Ok(Self::single(Pepper::new(secret.as_bytes())?));
        }
        let malformed = |problem: String| CredentialsError::MalformedPepperSecret(problem);
        let object: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(secret).map_err(|err| malformed(format!("not a JSON object ({err})")))?;
        if let Some(unknown) = object.keys().find(|key| !matches!(key.as_str(), "current" | "previous" | "next")) {
            return Err(malformed(format!("unknown field {unknown:?}; expected \"current\", \"previous\", \"next\"")));
        }
        let field = |name: &str| -> Result<Option<Pepper>, CredentialsError> {
            match object.get(name) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::String(text)) if !text.is_empty() => Ok(Some(Pepper::new(text.as_bytes())?)),
                Some(_) => Err(malformed(format!("\"{name}\" must be a non-empty string"))),
            }
        };
        let current = field("current")?.ok_or_else(|| malformed("\"current\" is required".into()))?;
        Self::checked(current, field("previous")?, field("next")?)
    }

    fn checked(current: Pepper, previous: Option<Pepper>, next: Option<Pepper>) -> Result<Self, CredentialsError> {
        let malformed = |problem: &str| Err(CredentialsError::MalformedPepperSecret(problem.into()));
        if previous.is_some() && next.is_some() {
            return malformed("\"previous\" and \"next\" cannot both be set: finish one rotation before the next");
        }
        if [&previous, &next].into_iter().flatten().any(|other| other.id == current.id) {
            return malformed("\"previous\" or \"next\" equals \"current\"");
        }
        Ok(Self { current, previous, next })
    }

    /// The secret value holding these peppers: the plain string when there is only a current
    /// pepper (readable by every version of the functions), else the JSON object.
    pub fn to_secret_string(&self) -> Result<String, CredentialsError> {
        if self.previous.is_none() && self.next.is_none() {
            return Ok(self.current.text()?.to_owned());
        }
        let mut object = serde_json::Map::new();
        object.insert("current".into(), self.current.text()?.into());
        for (name, pepper) in [("previous", &self.previous), ("next", &self.next)] {
            if let Some(pepper) = pepper {
                object.insert(name.into(), pepper.text()?.into());
            }
        }
        Ok(serde_json::Value::Object(object).to_string())
    }

    /// The pepper new hashes are made with.
    pub fn current(&self) -> &Pepper {
        &self.current
    }

    /// The pepper being retired, if any.
    pub fn previous(&self) -> Option<&Pepper> {
        self.previous.as_ref()
    }

    /// The pepper staged to become current, if any.
    pub fn next(&self) -> Option<&Pepper> {
        self.next.as_ref()
    }

    /// Keyed hash of a new secret, with the current pepper.
    pub fn hash(&self, secret: &str) -> KeyedHash {
        KeyedHash { hash: self.current.hash(secret), pepper_id: self.current.id.clone() }
    }

    /// Checks `secret` against `stored_hash` with the current pepper, then the previous one,
    /// then the next one; each comparison is constant-time. The common case (current) costs one
    /// HMAC; only a mismatch costs two.
    pub fn verify(&self, secret: &str, stored_hash: &str) -> Verification {
        if self.current.verify(secret, stored_hash) {
            return Verification::Match;
        }
        if self.previous.as_ref().is_some_and(|previous| previous.verify(secret, stored_hash)) {
            return Verification::MatchUnderPrevious { upgrade: self.hash(secret) };
        }
        if self.next.as_ref().is_some_and(|next| next.verify(secret, stored_hash)) {
            return Verification::Match;
        }
        Verification::Mismatch
    }

    /// Which pepper a hash stored with `pepper_id` was made with.
    pub fn hashed_with(&self, pepper_id: Option<&str>) -> HashedWith {
        let is = |pepper: Option<&Pepper>, id: &str| pepper.is_some_and(|pepper| pepper.id == id);
        match pepper_id {
            None => HashedWith::Unrecorded,
            Some(id) if id == self.current.id => HashedWith::Current,
            Some(id) if is(self.previous(), id) => HashedWith::Previous,
            Some(id) if is(self.next(), id) => HashedWith::Next,
            Some(_) => HashedWith::Retired,
        }
    }

    /// Rotation step 1: `next` is accepted everywhere, new hashes still use the current pepper.
    pub fn staged(&self, next: Pepper) -> Result<Self, CredentialsError> {
        if self.previous.is_some() || self.next.is_some() {
            return Err(CredentialsError::RotationStep(
                "a rotation is already under way: finish it (promote, then retire) first",
            ));
        }
        Self::checked(self.current.clone(), None, Some(next))
    }

    /// Rotation step 2: the staged pepper becomes current, the current one previous.
    pub fn promoted(&self) -> Result<Self, CredentialsError> {
        let next =
            self.next.clone().ok_or(CredentialsError::RotationStep("no next pepper is staged: stage one first"))?;
        Self::checked(next, Some(self.current.clone()), None)
    }

    /// Rotation step 3: the previous pepper is dropped; hashes still made with it stop verifying.
    pub fn retired(&self) -> Result<Self, CredentialsError> {
        if self.previous.is_none() {
            return Err(CredentialsError::RotationStep("there is no previous pepper to retire"));
        }
        Ok(Self::single(self.current.clone()))
    }

    /// Whether `other` holds the same peppers in the same roles.
    pub fn same_as(&self, other: &Peppers) -> bool {
        let id = |pepper: &Option<Pepper>| pepper.as_ref().map(|pepper| pepper.id.clone());
        self.current.id == other.current.id
            && id(&self.previous) == id(&other.previous)
            && id(&self.next) == id(&other.next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pepper(text: &str) -> Pepper {
        Pepper::new(text).unwrap()
    }

    #[test]
    fn keyed_hash_verifies_only_the_right_secret_and_pepper() {
        let pepper = pepper("pepper-one");
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
        let peppers = Peppers::parse(r#"{"current": "material-one", "previous": "material-two"}"#).unwrap();
        let debug = format!("{peppers:?}");
        assert!(!debug.contains("material"), "{debug}");
    }

    #[test]
    fn pepper_ids_are_short_stable_and_distinct() {
        assert_eq!(pepper("a").id(), pepper("a").id());
        assert_ne!(pepper("a").id(), pepper("b").id());
        assert_eq!(pepper("a").id().len(), 12);
    }

    #[test]
    fn a_plain_string_secret_is_the_current_pepper_alone() {
        // Today's secret: the whole value, unchanged (no trimming), is the pepper.
        let peppers = Peppers::parse("plain pepper ").unwrap();
        assert_eq!(peppers.current().id(), pepper("plain pepper ").id());
        assert!(peppers.previous().is_none() && peppers.next().is_none());
        assert_eq!(peppers.to_secret_string().unwrap(), "plain pepper ");
        assert!(matches!(Peppers::parse(""), Err(CredentialsError::EmptyPepper)));
    }

    #[test]
    fn the_json_secret_names_current_previous_or_next() {
        let peppers = Peppers::parse(r#" {"current": "new", "previous": "old"}"#).unwrap();
        assert_eq!(peppers.current().id(), pepper("new").id());
        assert_eq!(peppers.previous().map(Pepper::id), Some(pepper("old").id()));
        let staged = Peppers::parse(r#"{"current": "old", "next": "new", "previous": null}"#).unwrap();
        assert_eq!(staged.next().map(Pepper::id), Some(pepper("new").id()));
        // Round trip.
        let again = Peppers::parse(&peppers.to_secret_string().unwrap()).unwrap();
        assert!(again.same_as(&peppers));
        assert!(!again.same_as(&staged));
        assert!(Peppers::parse(r#"{"current": "only"}"#).unwrap().same_as(&Peppers::parse("only").unwrap()));
    }

    #[test]
    fn a_malformed_secret_is_a_clear_error_that_never_quotes_it() {
        let cases = [
            (r#"{"current": "pepper-material""#, "not a JSON object"),
            (r#"{"previous": "pepper-material"}"#, "\"current\" is required"),
            (r#"{"current": ""}"#, "\"current\" must be a non-empty string"),
            (r#"{"current": 42}"#, "\"current\" must be a non-empty string"),
            (r#"{"current": "pepper-material", "prev": "x"}"#, "unknown field \"prev\""),
            (r#"{"current": "pepper-material", "previous": "pepper-material"}"#, "equals \"current\""),
            (r#"{"current": "a", "previous": "b", "next": "c"}"#, "cannot both be set"),
            (r#"{"current": "pepper-material", "next": "x"} trailing"#, "not a JSON object"),
        ];
        for (secret, expected) in cases {
            let message = match Peppers::parse(secret) {
                Err(err @ CredentialsError::MalformedPepperSecret(_)) => err.to_string(),
                other => panic!("{secret}: expected a malformed secret error, got {other:?}"),
            };
            assert!(message.starts_with("the pepper secret is malformed: "), "{message}");
            assert!(message.contains(expected), "{secret}: {message}");
            assert!(!message.contains("pepper-material"), "{message}");
        }
    }

    #[test]
    fn verification_tries_current_then_previous_then_next() {
        let (old, new) = (pepper("old"), pepper("new"));
        let rotating = Peppers::single(new.clone()).checked_with(Some(old.clone()), None);
        let by_old = old.hash("s3cret");
        let by_new = new.hash("s3cret");
        assert_eq!(rotating.verify("s3cret", &by_new), Verification::Match);
        let Verification::MatchUnderPrevious { upgrade } = rotating.verify("s3cret", &by_old) else {
            panic!("expected a match under the previous pepper")
        };
        assert_eq!(upgrade, KeyedHash { hash: by_new.clone(), pepper_id: new.id().to_owned() });
        assert_eq!(rotating.verify("wrong", &by_old), Verification::Mismatch);
        assert_eq!(rotating.verify("s3cret", "garbage"), Verification::Mismatch);

        // Staged: hashes made with the next pepper are accepted, and never "upgraded" back.
        let staged = Peppers::single(old.clone()).staged(new.clone()).unwrap();
        assert_eq!(staged.verify("s3cret", &by_new), Verification::Match);
        assert_eq!(staged.verify("s3cret", &by_old), Verification::Match);
        assert_eq!(staged.hash("s3cret").hash, by_old);

        // Retired: only the current pepper.
        let retired = rotating.retired().unwrap();
        assert_eq!(retired.verify("s3cret", &by_old), Verification::Mismatch);
        assert!(retired.verify("s3cret", &by_new).is_match());
    }

    #[test]
    fn new_hashes_always_use_the_current_pepper() {
        let (old, new) = (pepper("old"), pepper("new"));
        let rotating = Peppers::single(new.clone()).checked_with(Some(old), None);
        let hashed = rotating.hash("s3cret");
        assert_eq!(hashed.pepper_id, new.id());
        assert!(new.verify("s3cret", &hashed.hash));
    }

    #[test]
    fn rotation_steps_stage_promote_and_retire_in_order() {
        let (old, new) = (pepper("old"), pepper("new"));
        let start = Peppers::single(old.clone());
        assert!(matches!(start.promoted(), Err(CredentialsError::RotationStep(_))));
        assert!(matches!(start.retired(), Err(CredentialsError::RotationStep(_))));

        let staged = start.staged(new.clone()).unwrap();
        assert_eq!(staged.current().id(), old.id());
        assert!(staged.staged(pepper("third")).is_err());
        assert!(staged.retired().is_err());

        let promoted = staged.promoted().unwrap();
        assert_eq!(promoted.current().id(), new.id());
        assert_eq!(promoted.previous().map(Pepper::id), Some(old.id()));
        assert!(promoted.staged(pepper("third")).is_err());
        assert_eq!(
            promoted.to_secret_string().unwrap(),
            serde_json::json!({"current": "new", "previous": "old"}).to_string()
        );

        let retired = promoted.retired().unwrap();
        assert!(retired.same_as(&Peppers::single(new.clone())));
        assert_eq!(retired.to_secret_string().unwrap(), "new");
        assert!(start.staged(old.clone()).is_err(), "the next pepper must differ from the current one");
    }

    #[test]
    fn recorded_pepper_ids_classify_stored_hashes() {
        let (old, new) = (pepper("old"), pepper("new"));
        let rotating = Peppers::single(new.clone()).checked_with(Some(old.clone()), None);
        assert_eq!(rotating.hashed_with(Some(new.id())), HashedWith::Current);
        assert_eq!(rotating.hashed_with(Some(old.id())), HashedWith::Previous);
        assert_eq!(rotating.hashed_with(None), HashedWith::Unrecorded);
        assert_eq!(rotating.hashed_with(Some("gone")), HashedWith::Retired);
        let staged = Peppers::single(old).staged(new.clone()).unwrap();
        assert_eq!(staged.hashed_with(Some(new.id())), HashedWith::Next);
    }

    impl Peppers {
        fn checked_with(self, previous: Option<Pepper>, next: Option<Pepper>) -> Self {
            Self::checked(self.current, previous, next).unwrap()
        }
    }
}
