//! Response bodies of the meeting endpoints, field for field as the spec's tables.

use crate::downloads::Download;
use chrono::{DateTime, Utc};
use meeting_data::model::{
    Attendee, CalendarEvent, Meeting, RecordingFormat, RecordingSource, ResponseStatus, TranscriptSegment,
};
use serde::{Serialize, Serializer};

/// A datetime rendered as Django REST Framework renders it: ISO 8601 in UTC with `Z`, and
/// microseconds only when there are any.
#[derive(Debug, Clone, Copy)]
pub struct DrfDateTime(pub DateTime<Utc>);

impl Serialize for DrfDateTime {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&format_datetime(self.0))
    }
}

/// `2026-11-02T09:00:00Z`, or `2026-11-02T09:00:00.250000Z` (the one format, shared with the
/// webhook payloads).
pub fn format_datetime(value: DateTime<Utc>) -> String {
    meeting_data::announcements::format_datetime(value)
}

/// An item of the meeting list.
#[derive(Debug, Serialize)]
pub struct MeetingListItem<'a> {
    pub id: i64,
    pub title: &'a str,
    pub start_time: DrfDateTime,
    pub end_time: DrfDateTime,
    pub created_at: DrfDateTime,
    pub status: meeting_data::model::MeetingStatus,
    pub summary_complete: bool,
    pub host_name: &'a str,
    pub calendar_event: Option<CalendarEventView<'a>>,
}

/// The meeting detail.
#[derive(Debug, Serialize)]
pub struct MeetingDetail<'a> {
    pub id: i64,
    pub title: &'a str,
    pub start_time: DrfDateTime,
    pub end_time: DrfDateTime,
    pub created_at: DrfDateTime,
    pub location: &'a str,
    pub status: meeting_data::model::MeetingStatus,
    pub summary_complete: bool,
    pub host: HostView<'a>,
    pub language: &'a str,
    pub keywords: &'a [String],
    pub participant_count: usize,
    pub duration_seconds: f64,
    pub num_cluster: u32,
    pub calendar_event: Option<CalendarEventView<'a>>,
}

/// The host object of the detail.
#[derive(Debug, Serialize)]
pub struct HostView<'a> {
    pub id: i64,
    pub name: &'a str,
    pub email: &'a str,
}

/// A calendar event.
#[derive(Debug, Serialize)]
pub struct CalendarEventView<'a> {
    pub event_id: &'a str,
    pub summary: &'a str,
    pub organizer_email: Option<&'a str>,
    pub attendees: Vec<AttendeeView<'a>>,
    pub meeting_link: Option<&'a str>,
    pub start_time: DrfDateTime,
    pub end_time: DrfDateTime,
}

/// An attendee of a calendar event.
#[derive(Debug, Serialize)]
pub struct AttendeeView<'a> {
    pub email: &'a str,
    pub display_name: Option<&'a str>,
    pub response_status: ResponseStatus,
}

/// The transcript response.
#[derive(Debug, Serialize)]
pub struct TranscriptView<'a> {
    pub meeting_id: i64,
    pub title: &'a str,
    pub total_segments: usize,
    pub transcripts: Vec<SegmentView<'a>>,
}

/// One transcript segment.
#[derive(Debug, Serialize)]
pub struct SegmentView<'a> {
    pub speaker: &'a str,
    pub text: &'a str,
    pub start_time: f64,
    pub end_time: f64,
}

/// The summary response.
#[derive(Debug, Serialize)]
pub struct SummaryView<'a> {
    pub meeting_id: i64,
    pub title: &'a str,
    pub summary: &'a serde_json::Value,
    pub notes: &'a str,
    pub keywords: &'a [String],
}

/// The participants response.
#[derive(Debug, Serialize)]
pub struct ParticipantsView<'a> {
    pub meeting_id: i64,
    pub title: &'a str,
    pub total_participants: usize,
    pub participants: &'a [meeting_data::model::Participant],
}

/// The recording response. `download_url` and `expires_at` (extensions) are set for a stored
/// recording, null otherwise.
#[derive(Debug, Serialize)]
pub struct RecordingView<'a> {
    pub meeting_id: i64,
    pub title: &'a str,
    pub recording_url: Option<String>,
    pub duration: f64,
    pub format: &'static str,
    pub download_url: Option<String>,
    pub expires_at: Option<DrfDateTime>,
}

/// The path of a meeting's stored recording file: `/api/v1/external/meeting/{id}/recording/file.mp3`.
pub fn recording_file_path(meeting_id: i64, format: RecordingFormat) -> String {
    format!("/api/v1/external/meeting/{meeting_id}/recording/{}", meeting_data::recordings::file_name(format))
}

impl<'a> MeetingListItem<'a> {
    /// The list item of a meeting.
    pub fn of(meeting: &'a Meeting) -> Self {
        Self {
            id: meeting.id,
            title: &meeting.title,
            start_time: DrfDateTime(meeting.start_time),
            end_time: DrfDateTime(meeting.end_time),
            created_at: DrfDateTime(meeting.created_at),
            status: meeting.status,
            summary_complete: meeting.summary_complete,
            host_name: &meeting.host.name,
            calendar_event: meeting.calendar_event.as_ref().map(CalendarEventView::of),
        }
    }
}

impl<'a> MeetingDetail<'a> {
    /// The detail of a meeting.
    pub fn of(meeting: &'a Meeting) -> Self {
        Self {
            id: meeting.id,
            title: &meeting.title,
            start_time: DrfDateTime(meeting.start_time),
            end_time: DrfDateTime(meeting.end_time),
            created_at: DrfDateTime(meeting.created_at),
            location: &meeting.location,
            status: meeting.status,
            summary_complete: meeting.summary_complete,
            host: HostView { id: meeting.host.id, name: &meeting.host.name, email: &meeting.host.email },
            language: &meeting.language,
            keywords: &meeting.keywords,
            participant_count: meeting.participants.len(),
            duration_seconds: meeting.duration_seconds(),
            num_cluster: meeting.num_cluster,
            calendar_event: meeting.calendar_event.as_ref().map(CalendarEventView::of),
        }
    }
}

impl<'a> CalendarEventView<'a> {
    fn of(event: &'a CalendarEvent) -> Self {
        Self {
            event_id: &event.event_id,
            summary: &event.summary,
            organizer_email: event.organizer_email.as_deref(),
            attendees: event.attendees.iter().map(AttendeeView::of).collect(),
            meeting_link: event.meeting_link.as_deref(),
            start_time: DrfDateTime(event.start_time),
            end_time: DrfDateTime(event.end_time),
        }
    }
}

impl<'a> AttendeeView<'a> {
    fn of(attendee: &'a Attendee) -> Self {
        Self {
            email: &attendee.email,
            display_name: attendee.display_name.as_deref(),
            response_status: attendee.response_status,
        }
    }
}

impl<'a> TranscriptView<'a> {
    /// The transcript of a meeting: confidential segments left out, in start-time order.
    pub fn of(meeting: &'a Meeting, segments: &'a [TranscriptSegment]) -> Self {
        let transcripts: Vec<SegmentView> = segments
            .iter()
            .filter(|segment| !segment.confidential)
            .map(|segment| SegmentView {
                speaker: segment.speaker_name(),
                text: segment.text(),
                start_time: segment.start_time,
                end_time: segment.end_time,
            })
            .collect();
        Self { meeting_id: meeting.id, title: &meeting.title, total_segments: transcripts.len(), transcripts }
    }
}

impl<'a> SummaryView<'a> {
    /// The summary of a meeting, passed through in whichever format it has.
    pub fn of(meeting: &'a Meeting) -> Self {
        Self {
            meeting_id: meeting.id,
            title: &meeting.title,
            summary: &meeting.summary,
            notes: &meeting.notes,
            keywords: &meeting.keywords,
        }
    }
}

impl<'a> ParticipantsView<'a> {
    /// The participants of a meeting.
    pub fn of(meeting: &'a Meeting) -> Self {
        Self {
            meeting_id: meeting.id,
            title: &meeting.title,
            total_participants: meeting.participants.len(),
            participants: &meeting.participants,
        }
    }
}

impl<'a> RecordingView<'a> {
    /// The preferred recording of a meeting, or the no-recording shape; `download` is the
    /// presigned URL of its object when it is stored.
    pub fn of(meeting: &'a Meeting, download: Option<Download>) -> Self {
        let recording = meeting.preferred_recording();
        let recording_url = recording.map(|r| match &r.source {
            RecordingSource::Url(url) => url.clone(),
            RecordingSource::Object(_) => recording_file_path(meeting.id, r.format),
        });
        Self {
            meeting_id: meeting.id,
            title: &meeting.title,
            recording_url,
            duration: recording.map_or(0.0, |r| r.duration),
            format: recording.map_or("", |r| r.format.as_str()),
            expires_at: download.as_ref().map(|d| DrfDateTime(d.expires_at)),
            download_url: download.map(|d| d.url),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes_render_like_drf() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        assert_eq!(format_datetime(at("2026-11-02T09:00:00Z")), "2026-11-02T09:00:00Z");
        assert_eq!(format_datetime(at("2026-11-02T10:00:00.25+01:00")), "2026-11-02T09:00:00.250000Z");
        assert_eq!(format_datetime(at("2026-11-02T09:00:00.123456789Z")), "2026-11-02T09:00:00.123456Z");
    }
}
