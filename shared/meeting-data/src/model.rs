//! Organizations, users and meetings as the platform stores them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// An organization whose meetings external applications may read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Organization {
    pub id: i64,
    pub name: String,
}

/// A member of an organization.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct User {
    pub id: i64,
    pub organization_id: i64,
    pub name: String,
    pub email: String,
    #[serde(default)]
    pub position: String,
    #[serde(default)]
    pub department: String,
}

/// Meeting status as the spec lists it. Transitions are the pipeline's business.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MeetingStatus {
    Upcoming,
    Ongoing,
    Recording,
    Past,
}

/// A meeting with its host and participants resolved at write time, so reads need no joins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meeting {
    pub id: i64,
    pub organization_id: i64,
    pub title: String,
    pub location: String,
    pub start_time: DateTime<Utc>,
    pub end_time: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub status: MeetingStatus,
    pub summary_complete: bool,
    pub host: Host,
    pub language: String,
    pub keywords: Vec<String>,
    pub num_cluster: u32,
    pub participants: Vec<Participant>,
    pub calendar_event: Option<CalendarEvent>,
    /// Markdown string, legacy structured object, or null; kept as JSON text so it round-trips exactly.
    #[serde(with = "json_text")]
    pub summary: serde_json::Value,
    pub notes: String,
    pub recordings: Vec<Recording>,
    /// The artifacts the meeting is expected to have, as imported; `None`: the default
    /// (`announcements::expected`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_artifacts: Option<Vec<crate::announcements::Artifact>>,
}

/// The meeting's host, a user of its organization.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Host {
    pub id: i64,
    pub name: String,
    pub email: String,
}

/// A participant: a user (with `id`) or an external guest (`id` null, empty position and department).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Participant {
    pub id: Option<i64>,
    pub name: String,
    pub email: Option<String>,
    pub position: String,
    pub department: String,
}

/// Calendar event of a meeting created through calendar integration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalendarEvent {
    pub event_id: String,
    pub summary: String,
    #[serde(default)]
    pub organizer_email: Option<String>,
    #[serde(default)]
    pub attendees: Vec<Attendee>,
    #[serde(default)]
    pub meeting_link: Option<String>,
    pub start_time: DateTime<Utc>,
    pub end_time: DateTime<Utc>,
}

/// An invited attendee of a calendar event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attendee {
    pub email: String,
    #[serde(default)]
    pub display_name: Option<String>,
    pub response_status: ResponseStatus,
}

/// Attendee response, as calendar providers report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResponseStatus {
    #[serde(rename = "accepted")]
    Accepted,
    #[serde(rename = "declined")]
    Declined,
    #[serde(rename = "tentative")]
    Tentative,
    #[serde(rename = "needsAction")]
    NeedsAction,
}

/// A recording file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "StoredRecording", into = "StoredRecording")]
pub struct Recording {
    pub format: RecordingFormat,
    pub source: RecordingSource,
    pub duration: f64,
}

/// Where a recording's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordingSource {
    /// A URL kept as imported; the API serves it as is.
    Url(String),
    /// An object of the stack's recordings bucket (`RECORDINGS_BUCKET`), under this key.
    Object(String),
}

/// A recording as stored: `url` (every item before stored files) or `object_key`, never both.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredRecording {
    format: RecordingFormat,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    object_key: Option<String>,
    duration: f64,
}

impl TryFrom<StoredRecording> for Recording {
    type Error = &'static str;

    fn try_from(stored: StoredRecording) -> Result<Self, Self::Error> {
        let source = match (stored.url, stored.object_key) {
            (Some(url), None) => RecordingSource::Url(url),
            (None, Some(key)) => RecordingSource::Object(key),
            _ => return Err("a recording has exactly one of `url` and `object_key`"),
        };
        Ok(Self { format: stored.format, source, duration: stored.duration })
    }
}

impl From<Recording> for StoredRecording {
    fn from(recording: Recording) -> Self {
        let (url, object_key) = match recording.source {
            RecordingSource::Url(url) => (Some(url), None),
            RecordingSource::Object(key) => (None, Some(key)),
        };
        Self { format: recording.format, url, object_key, duration: recording.duration }
    }
}

impl Recording {
    /// Its key in the recordings bucket, when it is stored there.
    pub fn object_key(&self) -> Option<&str> {
        match &self.source {
            RecordingSource::Object(key) => Some(key),
            RecordingSource::Url(_) => None,
        }
    }
}

/// Audio format of a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordingFormat {
    Mp3,
    Wav,
}

impl RecordingFormat {
    /// The format's name in responses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mp3 => "mp3",
            Self::Wav => "wav",
        }
    }

    /// The format a name stands for (`mp3`, `wav`; exact, lowercase).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "mp3" => Some(Self::Mp3),
            "wav" => Some(Self::Wav),
            _ => None,
        }
    }

    /// The media type an object of this format is stored with.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Mp3 => "audio/mpeg",
            Self::Wav => "audio/wav",
        }
    }
}

/// One diarized, transcribed stretch of speech.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranscriptSegment {
    #[serde(default)]
    pub speaker: Option<String>,
    pub start_time: f64,
    pub end_time: f64,
    #[serde(default)]
    pub raw_text: Option<String>,
    #[serde(default)]
    pub formatted_text: Option<String>,
    #[serde(default)]
    pub revised_text: Option<String>,
    #[serde(default)]
    pub confidential: bool,
}

impl Meeting {
    /// Seconds between start and end.
    pub fn duration_seconds(&self) -> f64 {
        (self.end_time - self.start_time).num_microseconds().map_or(0.0, |micros| micros as f64 / 1e6)
    }

    /// The recording to serve: mp3 when there is one, else the first.
    pub fn preferred_recording(&self) -> Option<&Recording> {
        self.recordings.iter().find(|r| r.format == RecordingFormat::Mp3).or_else(|| self.recordings.first())
    }

    /// Ids of the participants who are users.
    pub fn participant_user_ids(&self) -> Vec<i64> {
        self.participants.iter().filter_map(|p| p.id).collect()
    }
}

impl TranscriptSegment {
    /// The best text available: revised, then formatted, then raw. Empty texts count as missing.
    pub fn text(&self) -> &str {
        [&self.revised_text, &self.formatted_text, &self.raw_text]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .find(|text| !text.is_empty())
            .unwrap_or("")
    }

    /// The speaker's name, or `Unknown` when diarization could not identify one.
    pub fn speaker_name(&self) -> &str {
        self.speaker.as_deref().filter(|name| !name.is_empty()).unwrap_or("Unknown")
    }
}

/// Stores a JSON value as its text, so any legacy shape round-trips byte for byte.
mod json_text {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(value: &serde_json::Value, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&value.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<serde_json::Value, D::Error> {
        let text = String::deserialize(deserializer)?;
        serde_json::from_str(&text).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(revised: Option<&str>, formatted: Option<&str>, raw: Option<&str>) -> TranscriptSegment {
        TranscriptSegment {
            speaker: None,
            start_time: 0.0,
            end_time: 1.0,
            raw_text: raw.map(Into::into),
            formatted_text: formatted.map(Into::into),
            revised_text: revised.map(Into::into),
            confidential: false,
        }
    }

    #[test]
    fn segment_text_prefers_revised_then_formatted_then_raw() {
        assert_eq!(segment(Some("r"), Some("f"), Some("w")).text(), "r");
        assert_eq!(segment(None, Some("f"), Some("w")).text(), "f");
        assert_eq!(segment(Some(""), None, Some("w")).text(), "w");
        assert_eq!(segment(None, None, None).text(), "");
    }

    #[test]
    fn stored_recordings_read_as_before_and_name_one_source() {
        let old: Recording =
            serde_json::from_str(r#"{"format": "mp3", "url": "https://x/a.mp3", "duration": 1.5}"#).unwrap();
        assert_eq!(old.source, RecordingSource::Url("https://x/a.mp3".into()));
        let stored = Recording {
            format: RecordingFormat::Wav,
            source: RecordingSource::Object("recordings/k.wav".into()),
            duration: 2.0,
        };
        let json = serde_json::to_value(&stored).unwrap();
        assert_eq!(json, serde_json::json!({"format": "wav", "object_key": "recordings/k.wav", "duration": 2.0}));
        assert_eq!(serde_json::from_value::<Recording>(json).unwrap(), stored);
        for bad in [
            r#"{"format": "mp3", "duration": 1}"#,
            r#"{"format": "mp3", "url": "u", "object_key": "k", "duration": 1}"#,
        ] {
            assert!(serde_json::from_str::<Recording>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unidentified_speaker_is_unknown() {
        assert_eq!(segment(None, None, None).speaker_name(), "Unknown");
    }
}
