//! `admin pepper …`: rotating the pepper in three steps without invalidating credentials
//! (docs/operations.md, "Rotating the pepper").
//!
//! - `stage` writes `{"current": old, "next": new}`: every container learns the new pepper
//!   before any makes hashes with it.
//! - `promote` writes `{"current": new, "previous": old}`: new hashes use the new pepper, and a
//!   credential still hashed with the old one is re-hashed the first time it is used.
//! - `retire` writes the new pepper alone: credentials never used since `promote` stop working.
//!
//! `promote` and `retire` refuse until the step before has reached every container (the
//! functions re-read the secret every `credentials::REFRESH_INTERVAL`), and `retire` refuses
//! while an active credential still depends on the previous pepper; `--force` overrides both.

use credentials::{HashedWith, Pepper, PepperSource, Peppers, REFRESH_INTERVAL, SecretVersion};
use meeting_data::access::ExternalApp;
use platform_data::api_keys::ApiKeySummary;
use serde::Serialize;

/// How long after a step the next may follow: the functions' refresh interval plus a minute
/// for requests that started before their container re-read the secret.
pub const STEP_WAIT_SECONDS: i64 = REFRESH_INTERVAL.as_secs() as i64 + 60;

/// A rotation command refused, or the secret could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RotationError {
    #[error(transparent)]
    Credentials(#[from] credentials::CredentialsError),
    #[error(
        "the pepper secret was written {age} s ago; containers re-read it within {} s, so wait {} s more (or pass --force)",
        REFRESH_INTERVAL.as_secs(),
        STEP_WAIT_SECONDS - age
    )]
    TooSoon { age: i64 },
    #[error("Secrets Manager does not say when the pepper secret was written; check it yourself and pass --force")]
    UnknownAge,
    #[error(
        "{} active credential(s) still depend on the previous pepper and would stop working: {ids:?}. Wait until they are used, re-issue them, or pass --force",
        ids.len()
    )]
    StillInUse { ids: Vec<String> },
}

/// The secret's peppers by id (never their material).
#[derive(Debug, Serialize)]
pub struct SecretSummary {
    pub current: String,
    pub previous: Option<String>,
    pub next: Option<String>,
    /// Unix seconds.
    pub written_at: Option<i64>,
}

/// How many credentials of one kind are hashed with each pepper.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
pub struct Counts {
    pub current: usize,
    pub next: usize,
    pub previous: usize,
    pub unrecorded: usize,
    pub retired: usize,
    /// Deactivated applications (never verified, so never re-hashed; not counted above).
    pub inactive: usize,
}

/// A credential not hashed with the current pepper.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Lagging {
    pub kind: &'static str,
    pub id: String,
    pub hashed_with: HashedWith,
}

/// What `admin pepper status` prints.
#[derive(Debug, Serialize)]
pub struct RotationStatus {
    pub secret: SecretSummary,
    pub external_apps: Counts,
    pub api_keys: Counts,
    /// Active credentials hashed with the previous pepper, with none recorded (made before
    /// pepper ids were stored), or with a pepper already retired (those no longer verify).
    pub lagging: Vec<Lagging>,
}

impl RotationStatus {
    /// Where every active credential's hash stands against `version`'s peppers.
    pub fn new(version: &SecretVersion, apps: &[ExternalApp], keys: &[ApiKeySummary]) -> Self {
        let peppers = &version.peppers;
        let mut status = Self {
            secret: SecretSummary {
                current: peppers.current().id().to_owned(),
                previous: peppers.previous().map(|pepper| pepper.id().to_owned()),
                next: peppers.next().map(|pepper| pepper.id().to_owned()),
                written_at: version.created_at,
            },
            external_apps: Counts::default(),
            api_keys: Counts::default(),
            lagging: Vec::new(),
        };
        for app in apps {
            if !app.active {
                status.external_apps.inactive += 1;
                continue;
            }
            let hashed_with = peppers.hashed_with(app.pepper_id.as_deref());
            status.count("external_app", &app.client_id, hashed_with);
        }
        for key in keys {
            let hashed_with = peppers.hashed_with(key.pepper_id.as_deref());
            status.count("api_key", &key.key_id, hashed_with);
        }
        status
    }

    fn count(&mut self, kind: &'static str, id: &str, hashed_with: HashedWith) {
        let counts = if kind == "api_key" { &mut self.api_keys } else { &mut self.external_apps };
        match hashed_with {
            HashedWith::Current => counts.current += 1,
            HashedWith::Next => counts.next += 1,
            HashedWith::Previous => counts.previous += 1,
            HashedWith::Unrecorded => counts.unrecorded += 1,
            HashedWith::Retired => counts.retired += 1,
        }
        if !matches!(hashed_with, HashedWith::Current | HashedWith::Next) {
            self.lagging.push(Lagging { kind, id: id.to_owned(), hashed_with });
        }
    }

    /// The active credentials that would stop working if the previous pepper were retired now.
    pub fn depending_on_previous(&self) -> Vec<String> {
        self.lagging
            .iter()
            .filter(|lagging| matches!(lagging.hashed_with, HashedWith::Previous | HashedWith::Unrecorded))
            .map(|lagging| format!("{} {}", lagging.kind, lagging.id))
            .collect()
    }
}

/// Refuses a step while the secret's last write may not have reached every container.
pub fn require_settled(version: &SecretVersion, now: i64, force: bool) -> Result<(), RotationError> {
    if force {
        return Ok(());
    }
    let age = now - version.created_at.ok_or(RotationError::UnknownAge)?;
    if age < STEP_WAIT_SECONDS { Err(RotationError::TooSoon { age: age.max(0) }) } else { Ok(()) }
}

/// What a rotation step wrote, by pepper id.
#[derive(Debug, Serialize)]
pub struct StepDone {
    pub step: &'static str,
    pub current: String,
    pub previous: Option<String>,
    pub next: Option<String>,
    pub then: String,
}

impl StepDone {
    fn new(step: &'static str, peppers: &Peppers, then: String) -> Self {
        Self {
            step,
            current: peppers.current().id().to_owned(),
            previous: peppers.previous().map(|pepper| pepper.id().to_owned()),
            next: peppers.next().map(|pepper| pepper.id().to_owned()),
            then,
        }
    }
}

/// Step 1: stages a new random pepper as `next`.
pub async fn stage(source: &PepperSource) -> Result<StepDone, RotationError> {
    let version = source.read().await?;
    let staged = version.peppers.staged(Pepper::generate())?;
    source.write(&staged).await?;
    Ok(StepDone::new(
        "stage",
        &staged,
        format!("wait {STEP_WAIT_SECONDS} s for every container to read it, then `admin pepper promote`"),
    ))
}

/// Step 2: the staged pepper becomes current, the current one previous.
pub async fn promote(source: &PepperSource, now: i64, force: bool) -> Result<StepDone, RotationError> {
    let version = source.read().await?;
    let promoted = version.peppers.promoted()?;
    require_settled(&version, now, force)?;
    source.write(&promoted).await?;
    Ok(StepDone::new(
        "promote",
        &promoted,
        "credentials move to the new pepper as they are used; follow with `admin pepper status`, then `admin pepper retire`"
            .into(),
    ))
}

/// Step 3: drops the previous pepper of `version` (as `status` was computed against), once
/// nothing active depends on it.
pub async fn retire(
    source: &PepperSource,
    version: &SecretVersion,
    status: &RotationStatus,
    now: i64,
    force: bool,
) -> Result<StepDone, RotationError> {
    let retired = version.peppers.retired()?;
    if !force {
        require_settled(version, now, false)?;
        let ids = status.depending_on_previous();
        if !ids.is_empty() {
            return Err(RotationError::StillInUse { ids });
        }
    }
    source.write(&retired).await?;
    Ok(StepDone::new("retire", &retired, "the rotation is complete".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use uuid::Uuid;

    fn version(secret: &str, created_at: Option<i64>) -> SecretVersion {
        SecretVersion { peppers: Peppers::parse(secret).unwrap(), created_at }
    }

    fn key(key_id: &str, pepper_id: Option<&str>) -> ApiKeySummary {
        ApiKeySummary {
            key_id: key_id.into(),
            account_id: Uuid::nil().into(),
            name: "k".into(),
            pepper_id: pepper_id.map(str::to_owned),
            created_at: Utc::now(),
        }
    }

    #[test]
    fn status_counts_credentials_by_the_pepper_their_hash_was_made_with() {
        let (old, new) = (Peppers::parse("old").unwrap(), Peppers::parse("new").unwrap());
        let rotating = version(r#"{"current": "new", "previous": "old"}"#, Some(0));
        let (on_new, _) = ExternalApp::create("New", vec![1], &new, Utc::now());
        let (on_old, _) = ExternalApp::create("Old", vec![1], &old, Utc::now());
        let (mut inactive, _) = ExternalApp::create("Off", vec![1], &old, Utc::now());
        inactive.active = false;
        let keys = [key("k-new", Some(new.current().id())), key("k-legacy", None), key("k-gone", Some("retired-id"))];
        let status = RotationStatus::new(&rotating, &[on_new, on_old.clone(), inactive], &keys);
        assert_eq!(status.external_apps, Counts { current: 1, previous: 1, inactive: 1, ..Counts::default() });
        assert_eq!(status.api_keys, Counts { current: 1, unrecorded: 1, retired: 1, ..Counts::default() });
        assert_eq!(
            status.depending_on_previous(),
            [format!("external_app {}", on_old.client_id), "api_key k-legacy".into()]
        );
        assert_eq!(status.secret.previous.as_deref(), Some(old.current().id()));
        let printed = serde_json::to_string(&status).unwrap();
        assert!(!printed.contains("\"old\"") && !printed.contains("\"new\""), "{printed}");
    }

    #[test]
    fn a_step_waits_for_the_one_before_to_reach_every_container() {
        let written = version("p", Some(1_000));
        assert!(matches!(require_settled(&written, 1_010, false), Err(RotationError::TooSoon { age: 10 })));
        assert!(require_settled(&written, 1_000 + STEP_WAIT_SECONDS, false).is_ok());
        assert!(require_settled(&written, 1_010, true).is_ok());
        assert!(matches!(require_settled(&version("p", None), 1_010, false), Err(RotationError::UnknownAge)));
        let message = RotationError::TooSoon { age: 10 }.to_string();
        assert!(message.contains(&format!("wait {} s more", STEP_WAIT_SECONDS - 10)), "{message}");
    }
}
