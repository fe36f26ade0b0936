//! Importing organizations, users and meetings from the admin CLI's JSON format
//! (`fixtures/demo-meetings.json` is an example).
//!
//! Import is an upsert and all-or-nothing with respect to validation: the whole document is
//! parsed and checked (types, values, references to users and organizations in the document or
//! already stored) before anything is written. Every problem names its field, e.g.
//! `meetings[2].host_id: unknown user 99`.

use crate::announcements::Artifact;
use crate::model::{
    CalendarEvent, Host, Meeting, MeetingStatus, Organization, Participant, Recording, RecordingFormat,
    RecordingSource, TranscriptSegment, User,
};
use crate::recordings::{self, RecordingUpload};
use crate::store::{DirectoryStore, MeetingStore, StoreError};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;

/// The import document.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportDocument {
    #[serde(default)]
    pub organizations: Vec<OrganizationInput>,
    #[serde(default)]
    pub users: Vec<UserInput>,
    #[serde(default)]
    pub meetings: Vec<MeetingInput>,
    /// The files its recordings name (`file`), as [`prepare`] read them, by the path written;
    /// not part of the JSON.
    #[serde(skip)]
    pub files: HashMap<String, Result<Vec<u8>, String>>,
}

/// An organization in the document.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrganizationInput {
    pub id: i64,
    pub name: String,
}

/// A user in the document.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserInput {
    pub id: i64,
    pub organization_id: i64,
    pub name: String,
    pub email: String,
    #[serde(default)]
    pub position: String,
    #[serde(default)]
    pub department: String,
}

/// A meeting in the document.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeetingInput {
    pub id: i64,
    pub organization_id: i64,
    pub title: String,
    #[serde(default)]
    pub location: String,
    pub start_time: DateTime<Utc>,
    pub end_time: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    /// Defaults to the time of the import.
    #[serde(default)]
    pub updated_at: Option<DateTime<Utc>>,
    pub status: MeetingStatus,
    #[serde(default)]
    pub summary_complete: bool,
    pub host_id: i64,
    #[serde(default)]
    pub language: String,
    #[serde(default)]
    pub keywords: Vec<String>,
    #[serde(default)]
    pub num_cluster: u32,
    #[serde(default)]
    pub participants: Vec<ParticipantInput>,
    #[serde(default)]
    pub calendar_event: Option<CalendarEvent>,
    #[serde(default)]
    pub transcript: Vec<TranscriptSegment>,
    #[serde(default)]
    pub summary: serde_json::Value,
    #[serde(default)]
    pub notes: String,
    #[serde(default)]
    pub recordings: Vec<RecordingInput>,
    /// Which of `transcript`, `summary` and `recording` the meeting will have; when all are in,
    /// `meeting.ready` is announced. Default: transcript and summary, and the recording when
    /// `recordings` lists one.
    #[serde(default)]
    pub expected_artifacts: Option<Vec<crate::announcements::Artifact>>,
}

/// A recording: exactly one of `url` (kept as a link), `file` (a file to upload into the
/// recordings bucket, relative to the import document) or `object_key` (an object already in it).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordingInput {
    pub format: RecordingFormat,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub file: Option<String>,
    #[serde(default)]
    pub object_key: Option<String>,
    pub duration: f64,
}

/// A participant: `{"user_id": 11}` for a user, `{"name": …, "email": …}` for a guest.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParticipantInput {
    #[serde(default)]
    pub user_id: Option<i64>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub email: Option<String>,
}

/// A validated document, ready to write.
#[derive(Debug)]
pub struct ImportPlan {
    pub organizations: Vec<Organization>,
    pub users: Vec<User>,
    pub meetings: Vec<(Meeting, Vec<TranscriptSegment>)>,
    /// The recording files to upload before the meetings that name them are written, one per key.
    pub uploads: Vec<RecordingUpload>,
}

/// Counts of what an import wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportSummary {
    pub organizations: usize,
    pub users: usize,
    pub meetings: usize,
    pub transcript_segments: usize,
}

/// Why an import was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The document is invalid; nothing was written. Each entry names a field.
    #[error("invalid import document:\n  {}", .0.join("\n  "))]
    Invalid(Vec<String>),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A recording file could not be uploaded; no meeting was written after it.
    #[error("uploading recording {key}: {reason}")]
    Upload { key: String, reason: String },
}

/// Parses and validates a document, looking up referenced organizations and users that the
/// document itself does not contain, and reading the recording files it names relative to
/// `base` (the document's directory; `None`: a document not read from disk, which names none).
pub async fn prepare(
    directory: &DirectoryStore,
    json: &[u8],
    base: Option<&Path>,
    now: DateTime<Utc>,
) -> Result<ImportPlan, ImportError> {
    let mut document = parse_document(json)?;
    if let Some(base) = base {
        document = document.with_files(base);
    }

    let document_orgs: HashSet<i64> = document.organizations.iter().map(|o| o.id).collect();
    let document_users: HashSet<i64> = document.users.iter().map(|u| u.id).collect();
    let wanted_orgs: Vec<i64> = document
        .users
        .iter()
        .map(|u| u.organization_id)
        .chain(document.meetings.iter().map(|m| m.organization_id))
        .filter(|id| !document_orgs.contains(id))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let wanted_users: Vec<i64> = document
        .meetings
        .iter()
        .flat_map(|m| std::iter::once(m.host_id).chain(m.participants.iter().filter_map(|p| p.user_id)))
        .filter(|id| !document_users.contains(id))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let stored_orgs = directory.organizations(&wanted_orgs).await?;
    let stored_users = directory.users(&wanted_users).await?;
    validate(document, stored_orgs, stored_users, now)
}

impl ImportDocument {
    /// The document with every file its recordings name read relative to `base` (each path
    /// once; a failure is kept, for validation to report under the field).
    pub fn with_files(mut self, base: &Path) -> Self {
        let paths: BTreeSet<&str> =
            self.meetings.iter().flat_map(|m| &m.recordings).filter_map(|r| r.file.as_deref()).collect();
        let files = paths
            .into_iter()
            .map(|path| (path.to_owned(), std::fs::read(base.join(path)).map_err(|err| err.to_string())))
            .collect();
        self.files = files;
        self
    }
}

/// Parses the JSON document; a type error names the field's path.
pub fn parse_document(json: &[u8]) -> Result<ImportDocument, ImportError> {
    let deserializer = &mut serde_json::Deserializer::from_slice(json);
    serde_path_to_error::deserialize(deserializer).map_err(|err| {
        let path = err.path().to_string();
        let message = err.into_inner().to_string();
        ImportError::Invalid(vec![if path == "." { message } else { format!("{path}: {message}") }])
    })
}

/// Writes a validated plan: organizations, then users, then meetings with their transcripts.
pub async fn apply(
    directory: &DirectoryStore,
    meetings: &MeetingStore,
    plan: &ImportPlan,
) -> Result<ImportSummary, StoreError> {
    directory.put_organizations(&plan.organizations).await?;
    directory.put_users(&plan.users).await?;
    for (meeting, transcript) in &plan.meetings {
        meetings.put(meeting, transcript).await?;
    }
    Ok(ImportSummary {
        organizations: plan.organizations.len(),
        users: plan.users.len(),
        meetings: plan.meetings.len(),
        transcript_segments: plan.meetings.iter().map(|(_, t)| t.len()).sum(),
    })
}

/// Uploads the plan's recording files into the recordings bucket; call it before [`apply`], so
/// that no stored meeting names an object that is not there.
#[cfg(feature = "uploads")]
pub async fn upload(bucket: &object_storage::transfer::Transfer, plan: &ImportPlan) -> Result<usize, ImportError> {
    for upload in &plan.uploads {
        bucket
            .put_object(&upload.key, upload.bytes.clone(), upload.content_type)
            .await
            .map_err(|err| ImportError::Upload { key: upload.key.clone(), reason: err.to_string() })?;
    }
    Ok(plan.uploads.len())
}

/// Checks values and references; pure, so every rule is unit-tested.
pub fn validate(
    document: ImportDocument,
    stored_orgs: Vec<Organization>,
    stored_users: Vec<User>,
    now: DateTime<Utc>,
) -> Result<ImportPlan, ImportError> {
    let mut errors = Vec::new();
    let mut org_ids: HashSet<i64> = stored_orgs.iter().map(|o| o.id).collect();
    let mut seen = HashSet::new();
    for (i, org) in document.organizations.iter().enumerate() {
        let at = format!("organizations[{i}]");
        check_id(&mut errors, &at, org.id, &mut seen);
        if org.name.trim().is_empty() {
            errors.push(format!("{at}.name: must not be empty"));
        }
        org_ids.insert(org.id);
    }

    let mut users: HashMap<i64, User> = stored_users.into_iter().map(|u| (u.id, u)).collect();
    let mut seen = HashSet::new();
    for (i, user) in document.users.iter().enumerate() {
        let at = format!("users[{i}]");
        check_id(&mut errors, &at, user.id, &mut seen);
        if !org_ids.contains(&user.organization_id) {
            errors.push(format!("{at}.organization_id: unknown organization {}", user.organization_id));
        }
        if user.name.trim().is_empty() {
            errors.push(format!("{at}.name: must not be empty"));
        }
        if !user.email.contains('@') {
            errors.push(format!("{at}.email: not an e-mail address"));
        }
        users.insert(
            user.id,
            User {
                id: user.id,
                organization_id: user.organization_id,
                name: user.name.clone(),
                email: user.email.clone(),
                position: user.position.clone(),
                department: user.department.clone(),
            },
        );
    }

    let mut meetings = Vec::new();
    let mut uploads = Vec::new();
    let mut seen = HashSet::new();
    for (i, input) in document.meetings.into_iter().enumerate() {
        let at = format!("meetings[{i}]");
        check_id(&mut errors, &at, input.id, &mut seen);
        if !org_ids.contains(&input.organization_id) {
            errors.push(format!("{at}.organization_id: unknown organization {}", input.organization_id));
        }
        if input.end_time < input.start_time {
            errors.push(format!("{at}.end_time: must not be before start_time"));
        }
        if !matches!(
            input.summary,
            serde_json::Value::Null | serde_json::Value::String(_) | serde_json::Value::Object(_)
        ) {
            errors.push(format!("{at}.summary: must be a string, an object or null"));
        }
        let host = match users.get(&input.host_id) {
            Some(user) if user.organization_id == input.organization_id => {
                Some(Host { id: user.id, name: user.name.clone(), email: user.email.clone() })
            }
            Some(_) => {
                errors.push(format!(
                    "{at}.host_id: user {} is not in organization {}",
                    input.host_id, input.organization_id
                ));
                None
            }
            None => {
                errors.push(format!("{at}.host_id: unknown user {}", input.host_id));
                None
            }
        };
        let mut participants = Vec::new();
        for (j, participant) in input.participants.iter().enumerate() {
            let at = format!("{at}.participants[{j}]");
            match (participant.user_id, &participant.name) {
                (Some(id), None) => match users.get(&id) {
                    Some(user) => participants.push(Participant {
                        id: Some(user.id),
                        name: user.name.clone(),
                        email: Some(user.email.clone()),
                        position: user.position.clone(),
                        department: user.department.clone(),
                    }),
                    None => errors.push(format!("{at}.user_id: unknown user {id}")),
                },
                (None, Some(name)) if !name.trim().is_empty() => participants.push(Participant {
                    id: None,
                    name: name.clone(),
                    email: participant.email.clone(),
                    position: String::new(),
                    department: String::new(),
                }),
                (None, _) => errors.push(format!("{at}: needs user_id (a user) or a non-empty name (a guest)")),
                (Some(_), Some(_)) => errors.push(format!("{at}: give user_id or name, not both")),
            }
        }
        for (j, segment) in input.transcript.iter().enumerate() {
            let valid = segment.start_time.is_finite()
                && segment.end_time.is_finite()
                && segment.start_time >= 0.0
                && segment.end_time >= segment.start_time;
            if !valid {
                errors.push(format!(
                    "{at}.transcript[{j}]: times must be finite, non-negative and end at or after start"
                ));
            }
        }
        let mut recordings = Vec::new();
        for (j, recording) in input.recordings.into_iter().enumerate() {
            let at = format!("{at}.recordings[{j}]");
            if !recording.duration.is_finite() || recording.duration < 0.0 {
                errors.push(format!("{at}.duration: must be a non-negative number of seconds"));
            }
            let source = match (recording.url, recording.file, recording.object_key) {
                (Some(url), None, None) if url.trim().is_empty() => Err(format!("{at}.url: must not be empty")),
                (Some(url), None, None) => Ok(RecordingSource::Url(url)),
                (None, None, Some(key)) => recordings::check_object_key(&key)
                    .map(|()| RecordingSource::Object(key))
                    .map_err(|why| format!("{at}.object_key: {why}")),
                (None, Some(path), None) => match document.files.get(&path) {
                    Some(Ok(bytes)) if bytes.is_empty() => Err(format!("{at}.file: {path} is empty")),
                    Some(Ok(bytes)) => {
                        let key = recordings::object_key(input.organization_id, input.id, bytes, recording.format);
                        if !uploads.iter().any(|upload: &RecordingUpload| upload.key == key) {
                            uploads.push(RecordingUpload {
                                key: key.clone(),
                                bytes: bytes.clone(),
                                content_type: recording.format.content_type(),
                            });
                        }
                        Ok(RecordingSource::Object(key))
                    }
                    Some(Err(why)) => Err(format!("{at}.file: cannot read {path}: {why}")),
                    None => Err(format!("{at}.file: only a document read from disk may name files")),
                },
                _ => Err(format!("{at}: give exactly one of url, file and object_key")),
            };
            match source {
                Ok(source) => {
                    recordings.push(Recording { format: recording.format, source, duration: recording.duration })
                }
                Err(error) => errors.push(error),
            }
        }
        let Some(host) = host else { continue };
        let mut transcript = input.transcript;
        transcript.sort_by(|a, b| a.start_time.total_cmp(&b.start_time));
        meetings.push((
            Meeting {
                id: input.id,
                organization_id: input.organization_id,
                title: input.title,
                location: input.location,
                start_time: input.start_time,
                end_time: input.end_time,
                created_at: input.created_at,
                updated_at: input.updated_at.unwrap_or(now),
                status: input.status,
                summary_complete: input.summary_complete,
                host,
                language: input.language,
                keywords: input.keywords,
                num_cluster: input.num_cluster,
                participants,
                calendar_event: input.calendar_event,
                summary: input.summary,
                notes: input.notes,
                recordings,
                expected_artifacts: input
                    .expected_artifacts
                    .map(|expected| Artifact::ALL.into_iter().filter(|artifact| expected.contains(artifact)).collect()),
            },
            transcript,
        ));
    }

    if !errors.is_empty() {
        return Err(ImportError::Invalid(errors));
    }
    let organizations = document.organizations.into_iter().map(|o| Organization { id: o.id, name: o.name }).collect();
    let document_user_ids: HashSet<i64> = document.users.iter().map(|u| u.id).collect();
    let users = users.into_values().filter(|u| document_user_ids.contains(&u.id)).collect();
    Ok(ImportPlan { organizations, users, meetings, uploads })
}

fn check_id(errors: &mut Vec<String>, at: &str, id: i64, seen: &mut HashSet<i64>) {
    if id <= 0 {
        errors.push(format!("{at}.id: must be a positive integer"));
    } else if !seen.insert(id) {
        errors.push(format!("{at}.id: duplicate id {id}"));
    }
}

/// The demo fixture's directory, where its recording files are (unit tests).
#[cfg(test)]
pub(crate) const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures");

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> ImportDocument {
        serde_json::from_str(json).unwrap()
    }

    fn invalid(json: &str) -> Vec<String> {
        match validate(parse(json), vec![], vec![], Utc::now()) {
            Err(ImportError::Invalid(errors)) => errors,
            other => panic!("expected invalid, got {other:?}"),
        }
    }

    const MEETING: &str = r#""id": 5, "organization_id": 1, "title": "T", "start_time": "2026-01-01T10:00:00Z",
        "created_at": "2026-01-01T09:00:00Z", "status": "past", "host_id": 11"#;

    #[test]
    fn the_demo_fixture_is_valid() {
        let json = include_str!("../../../fixtures/demo-meetings.json");
        let document = parse(json).with_files(Path::new(FIXTURES));
        let plan = validate(document, vec![], vec![], Utc::now()).unwrap();
        assert_eq!((plan.organizations.len(), plan.users.len(), plan.meetings.len()), (2, 3, 3));
        let (first, transcript) = &plan.meetings[0];
        assert_eq!(first.participants[2].id, None);
        assert_eq!(first.participants[2].position, "");
        assert_eq!(transcript.len(), 4);
        let wav = std::fs::read(format!("{FIXTURES}/recordings/1002.wav")).unwrap();
        let key = recordings::object_key(1, 1002, &wav, RecordingFormat::Wav);
        assert_eq!(plan.meetings[1].0.recordings[0].source, RecordingSource::Object(key.clone()));
        assert_eq!(plan.uploads, vec![RecordingUpload { key, bytes: wav, content_type: "audio/wav" }]);
    }

    #[test]
    fn recordings_name_one_source_each_checked_under_its_field() {
        let dir = std::env::temp_dir().join(format!("import-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.mp3"), b"ID3 audio").unwrap();
        std::fs::write(dir.join("empty.mp3"), b"").unwrap();
        let document = |recordings: &str| {
            format!(
                r#"{{"organizations": [{{"id": 1, "name": "O"}}],
                    "users": [{{"id": 11, "organization_id": 1, "name": "U", "email": "u@x"}}],
                    "meetings": [{{{MEETING}, "end_time": "2026-01-01T11:00:00Z", "recordings": [{recordings}]}}]}}"#
            )
        };
        let bad = document(
            r#"{"format": "mp3", "duration": 1},
               {"format": "mp3", "url": "u", "file": "a.mp3", "duration": 1},
               {"format": "mp3", "file": "missing.mp3", "duration": 1},
               {"format": "mp3", "file": "empty.mp3", "duration": 1},
               {"format": "mp3", "object_key": "other/x.mp3", "duration": 1}"#,
        );
        let read = |json: &str| parse_document(json.as_bytes()).unwrap().with_files(&dir);
        let Err(ImportError::Invalid(errors)) = validate(read(&bad), vec![], vec![], Utc::now()) else { panic!() };
        assert_eq!(errors.len(), 5, "{errors:?}");
        assert_eq!(errors[0], "meetings[0].recordings[0]: give exactly one of url, file and object_key");
        assert_eq!(errors[1], "meetings[0].recordings[1]: give exactly one of url, file and object_key");
        assert!(errors[2].starts_with("meetings[0].recordings[2].file: cannot read missing.mp3: "), "{errors:?}");
        assert_eq!(errors[3], "meetings[0].recordings[3].file: empty.mp3 is empty");
        assert_eq!(errors[4], "meetings[0].recordings[4].object_key: must start with recordings/");

        let good = document(
            r#"{"format": "mp3", "file": "a.mp3", "duration": 1},
               {"format": "mp3", "file": "a.mp3", "duration": 1},
               {"format": "wav", "object_key": "recordings/1/5/x.wav", "duration": 2}"#,
        );
        let plan = validate(read(&good), vec![], vec![], Utc::now()).unwrap();
        let key = recordings::object_key(1, 5, b"ID3 audio", RecordingFormat::Mp3);
        let sources: Vec<_> = plan.meetings[0].0.recordings.iter().map(|r| r.source.clone()).collect();
        assert_eq!(
            sources,
            vec![
                RecordingSource::Object(key.clone()),
                RecordingSource::Object(key.clone()),
                RecordingSource::Object("recordings/1/5/x.wav".into())
            ]
        );
        assert_eq!(plan.uploads.len(), 1, "one upload per key");

        let unread = parse_document(good.as_bytes()).unwrap();
        let Err(ImportError::Invalid(errors)) = validate(unread, vec![], vec![], Utc::now()) else { panic!() };
        assert_eq!(errors[0], "meetings[0].recordings[0].file: only a document read from disk may name files");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn type_errors_name_the_path() {
        let Err(ImportError::Invalid(errors)) = parse_document(br#"{"meetings": [{"id": "x"}]}"#) else { panic!() };
        assert!(errors[0].starts_with("meetings[0].id: invalid type"), "{errors:?}");
        let Err(ImportError::Invalid(errors)) = parse_document(br#"{"meeting": []}"#) else { panic!() };
        assert!(errors[0].contains("unknown field `meeting`"), "{errors:?}");
    }

    #[test]
    fn references_must_resolve() {
        let errors = invalid(&format!(r#"{{"meetings": [{{{MEETING}, "end_time": "2026-01-01T11:00:00Z"}}]}}"#));
        assert_eq!(
            errors,
            vec!["meetings[0].organization_id: unknown organization 1", "meetings[0].host_id: unknown user 11"]
        );
    }

    #[test]
    fn stored_records_satisfy_references() {
        let doc = parse(&format!(
            r#"{{"meetings": [{{{MEETING}, "end_time": "2026-01-01T11:00:00Z", "participants": [{{"name": "Guest"}}]}}]}}"#
        ));
        let org = Organization { id: 1, name: "O".into() };
        let user = User {
            id: 11,
            organization_id: 1,
            name: "U".into(),
            email: "u@x".into(),
            position: String::new(),
            department: String::new(),
        };
        let plan = validate(doc, vec![org], vec![user], Utc::now()).unwrap();
        assert!(plan.organizations.is_empty() && plan.users.is_empty());
        assert_eq!(plan.meetings[0].0.host.name, "U");
    }

    #[test]
    fn value_rules_name_their_field() {
        let errors = invalid(&format!(
            r#"{{"organizations": [{{"id": 1, "name": "O"}}, {{"id": 1, "name": ""}}],
                "users": [{{"id": 11, "organization_id": 1, "name": "U", "email": "u@x"}}],
                "meetings": [{{{MEETING}, "end_time": "2025-01-01T00:00:00Z", "summary": [1],
                  "participants": [{{}}, {{"user_id": 11, "name": "x"}}],
                  "transcript": [{{"start_time": 5.0, "end_time": 1.0}}],
                  "recordings": [{{"format": "mp3", "url": "", "duration": -1}}]}}]}}"#
        ));
        assert_eq!(
            errors,
            vec![
                "organizations[1].id: duplicate id 1",
                "organizations[1].name: must not be empty",
                "meetings[0].end_time: must not be before start_time",
                "meetings[0].summary: must be a string, an object or null",
                "meetings[0].participants[0]: needs user_id (a user) or a non-empty name (a guest)",
                "meetings[0].participants[1]: give user_id or name, not both",
                "meetings[0].transcript[0]: times must be finite, non-negative and end at or after start",
                "meetings[0].recordings[0].duration: must be a non-negative number of seconds",
                "meetings[0].recordings[0].url: must not be empty",
            ]
        );
    }
}
