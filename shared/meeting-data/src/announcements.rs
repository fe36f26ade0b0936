//! What a write of a meeting announces to external applications' webhooks: `meeting.created` or
//! `meeting.updated`, `{artifact}.ready` for each artifact that is in now and was not before, and
//! `meeting.ready` when every artifact the meeting is expected to have is in for the first time.
//! The write records them as one outbox event of the meeting's organization
//! (`webhooks::audience`), in the meeting's own transaction (`MeetingStore::put`).
//!
//! Artifacts: the transcript (at least one segment), the summary (not null and not an empty
//! string) and the recording (at least one). A meeting expects `expected_artifacts` as imported;
//! by default the transcript and the summary, and the recording when it lists recordings.

use crate::model::Meeting;
use chrono::{DateTime, Timelike, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// An artifact of a meeting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Artifact {
    Transcript,
    Summary,
    Recording,
}

impl Artifact {
    pub const ALL: [Artifact; 3] = [Artifact::Transcript, Artifact::Summary, Artifact::Recording];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Transcript => "transcript",
            Self::Summary => "summary",
            Self::Recording => "recording",
        }
    }

    /// The event announcing it is in.
    fn ready_event(self) -> &'static str {
        match self {
            Self::Transcript => "transcript.ready",
            Self::Summary => "summary.ready",
            Self::Recording => "recording.ready",
        }
    }
}

/// Which artifacts a meeting has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Artifacts {
    pub transcript: bool,
    pub summary: bool,
    pub recording: bool,
}

impl Artifacts {
    /// Those of `meeting`, whose transcript has `segments` segments.
    pub fn of(meeting: &Meeting, segments: usize) -> Self {
        let summary = match &meeting.summary {
            Value::Null => false,
            Value::String(text) => !text.trim().is_empty(),
            _ => true,
        };
        Self { transcript: segments > 0, summary, recording: !meeting.recordings.is_empty() }
    }

    pub fn has(self, artifact: Artifact) -> bool {
        match artifact {
            Artifact::Transcript => self.transcript,
            Artifact::Summary => self.summary,
            Artifact::Recording => self.recording,
        }
    }

    /// As the meeting item keeps them (`artifacts`): the names of those it has.
    pub fn names(self) -> Vec<&'static str> {
        Artifact::ALL.into_iter().filter(|artifact| self.has(*artifact)).map(Artifact::as_str).collect()
    }

    /// From the meeting item's `artifacts` (unknown names are ignored).
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        let mut artifacts = Self::default();
        for name in names {
            match name {
                "transcript" => artifacts.transcript = true,
                "summary" => artifacts.summary = true,
                "recording" => artifacts.recording = true,
                _ => {}
            }
        }
        artifacts
    }
}

/// The artifacts `meeting` is expected to have.
pub fn expected(meeting: &Meeting) -> Vec<Artifact> {
    match &meeting.expected_artifacts {
        Some(expected) => expected.clone(),
        None if meeting.recordings.is_empty() => vec![Artifact::Transcript, Artifact::Summary],
        None => Artifact::ALL.to_vec(),
    }
}

/// What the meeting was before a write: absent (a new meeting), or its artifacts (`None` for a
/// meeting stored before artifacts were kept: nothing is announced ready for it but changes).
pub enum Before {
    New,
    Stored(Option<Artifacts>),
}

/// The event types a write announces, in a fixed order.
pub fn event_types(before: &Before, now: Artifacts, expected: &[Artifact]) -> Vec<&'static str> {
    let mut types = vec![if matches!(before, Before::New) { "meeting.created" } else { "meeting.updated" }];
    let previous = match before {
        Before::New => Some(Artifacts::default()),
        Before::Stored(artifacts) => *artifacts,
    };
    let Some(previous) = previous else { return types };
    for artifact in Artifact::ALL {
        if now.has(artifact) && !previous.has(artifact) {
            types.push(artifact.ready_event());
        }
    }
    let all_in = |artifacts: Artifacts| expected.iter().all(|artifact| artifacts.has(*artifact));
    if all_in(now) && !(matches!(before, Before::Stored(_)) && all_in(previous)) {
        types.push("meeting.ready");
    }
    types
}

/// The payload of every meeting event: `updated_at` exactly as the meeting API shows it, so it
/// is what the next `updated_after` sync returns.
pub fn payload(meeting: &Meeting, artifacts: Artifacts) -> Value {
    json!({
        "meeting_id": meeting.id,
        "organization_id": meeting.organization_id,
        "status": meeting.status,
        "updated_at": format_datetime(meeting.updated_at),
        "artifacts": {
            "transcript": artifacts.transcript,
            "summary": artifacts.summary,
            "recording": artifacts.recording,
        },
    })
}

/// `2026-11-02T09:00:00Z`, or `2026-11-02T09:00:00.250000Z`: Django REST Framework's format, the
/// one the meeting API answers with.
pub fn format_datetime(value: DateTime<Utc>) -> String {
    let micros = value.nanosecond() / 1_000 % 1_000_000;
    if micros == 0 {
        value.format("%Y-%m-%dT%H:%M:%SZ").to_string()
    } else {
        format!("{}.{micros:06}Z", value.format("%Y-%m-%dT%H:%M:%S"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRANSCRIPT: Artifacts = Artifacts { transcript: true, summary: false, recording: false };
    const BOTH: Artifacts = Artifacts { transcript: true, summary: true, recording: false };
    const DEFAULT_EXPECTED: [Artifact; 2] = [Artifact::Transcript, Artifact::Summary];

    #[test]
    fn a_new_meeting_announces_what_it_has() {
        assert_eq!(event_types(&Before::New, Artifacts::default(), &DEFAULT_EXPECTED), ["meeting.created"]);
        assert_eq!(event_types(&Before::New, TRANSCRIPT, &DEFAULT_EXPECTED), ["meeting.created", "transcript.ready"]);
        assert_eq!(
            event_types(&Before::New, BOTH, &DEFAULT_EXPECTED),
            ["meeting.created", "transcript.ready", "summary.ready", "meeting.ready"]
        );
        // Nothing expected: ready at once.
        assert_eq!(event_types(&Before::New, Artifacts::default(), &[]), ["meeting.created", "meeting.ready"]);
    }

    #[test]
    fn an_update_announces_only_what_is_new() {
        let before = Before::Stored(Some(TRANSCRIPT));
        assert_eq!(event_types(&before, TRANSCRIPT, &DEFAULT_EXPECTED), ["meeting.updated"]);
        assert_eq!(
            event_types(&before, BOTH, &DEFAULT_EXPECTED),
            ["meeting.updated", "summary.ready", "meeting.ready"]
        );
        // Ready once: a later write of a ready meeting is an update only.
        assert_eq!(event_types(&Before::Stored(Some(BOTH)), BOTH, &DEFAULT_EXPECTED), ["meeting.updated"]);
        // A recording expected keeps the meeting from being ready until it is in.
        let all = Artifact::ALL;
        assert_eq!(event_types(&Before::Stored(Some(TRANSCRIPT)), BOTH, &all), ["meeting.updated", "summary.ready"]);
        let everything = Artifacts { transcript: true, summary: true, recording: true };
        assert_eq!(
            event_types(&Before::Stored(Some(BOTH)), everything, &all),
            ["meeting.updated", "recording.ready", "meeting.ready"]
        );
        // Stored before artifacts were kept: an update, nothing ready.
        assert_eq!(event_types(&Before::Stored(None), everything, &all), ["meeting.updated"]);
    }

    #[test]
    fn artifacts_round_trip_through_their_names() {
        for artifacts in [Artifacts::default(), TRANSCRIPT, BOTH] {
            assert_eq!(Artifacts::from_names(artifacts.names()), artifacts);
        }
        assert_eq!(Artifacts::from_names(["summary", "hologram"]), Artifacts { summary: true, ..Default::default() });
    }

    #[test]
    fn datetimes_read_as_the_api_writes_them() {
        let at = |text: &str| DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc);
        assert_eq!(format_datetime(at("2026-11-02T09:00:00Z")), "2026-11-02T09:00:00Z");
        assert_eq!(format_datetime(at("2026-11-02T10:00:00.25+01:00")), "2026-11-02T09:00:00.250000Z");
    }
}
