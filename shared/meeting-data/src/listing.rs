//! Filtering and ordering the meeting list from index entries alone.

use crate::store::meetings::IndexEntry;
use chrono::{DateTime, NaiveDate, Utc};

/// The list filters; `None` means "not filtered".
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MeetingFilter {
    /// Case-insensitive substring of the title.
    pub title: Option<String>,
    /// Meetings with ANY of these participant user ids.
    pub participants: Option<Vec<i64>>,
    /// Created on or after this date (UTC).
    pub created_after: Option<NaiveDate>,
    /// Created on or before this date (UTC).
    pub created_before: Option<NaiveDate>,
    pub summary_complete: Option<bool>,
    pub from_calendar: Option<bool>,
    /// Changed at or after this instant (incremental sync).
    pub updated_after: Option<DateTime<Utc>>,
}

impl MeetingFilter {
    /// Whether an entry passes every filter.
    pub fn matches(&self, entry: &IndexEntry) -> bool {
        let created = entry.created_at.date_naive();
        self.title.as_ref().is_none_or(|title| entry.title.to_lowercase().contains(&title.to_lowercase()))
            && self.participants.as_ref().is_none_or(|ids| entry.participant_ids.iter().any(|id| ids.contains(id)))
            && self.created_after.is_none_or(|date| created >= date)
            && self.created_before.is_none_or(|date| created <= date)
            && self.summary_complete.is_none_or(|flag| entry.summary_complete == flag)
            && self.from_calendar.is_none_or(|flag| entry.from_calendar == flag)
            && self.updated_after.is_none_or(|instant| entry.updated_at >= instant)
    }
}

/// Merges per-organization entries, keeps those passing `filter`, and orders them newest first
/// (start time descending, then id descending).
pub fn filter_and_order(per_organization: Vec<Vec<IndexEntry>>, filter: &MeetingFilter) -> Vec<IndexEntry> {
    let mut entries: Vec<IndexEntry> = per_organization.into_iter().flatten().filter(|e| filter.matches(e)).collect();
    entries.sort_by(|a, b| b.list_sort.cmp(&a.list_sort));
    entries
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::meetings::list_sort_key;

    fn entry(id: i64, title: &str, start: &str, created: &str) -> IndexEntry {
        IndexEntry {
            id,
            title: title.into(),
            created_at: created.parse().unwrap(),
            updated_at: created.parse().unwrap(),
            summary_complete: id % 2 == 0,
            from_calendar: id % 3 == 0,
            participant_ids: vec![id * 10],
            list_sort: list_sort_key(start.parse().unwrap(), id),
        }
    }

    #[test]
    fn merges_newest_first_with_id_tiebreak() {
        let a = vec![entry(1, "a", "2026-01-01T10:00:00Z", "2026-01-01T00:00:00Z")];
        let b = vec![
            entry(3, "b", "2026-01-02T10:00:00Z", "2026-01-01T00:00:00Z"),
            entry(2, "c", "2026-01-01T10:00:00Z", "2026-01-01T00:00:00Z"),
        ];
        let ids: Vec<i64> = filter_and_order(vec![a, b], &MeetingFilter::default()).iter().map(|e| e.id).collect();
        assert_eq!(ids, vec![3, 2, 1]);
    }

    #[test]
    fn filters_combine() {
        let e = entry(6, "Weekly Product Sync", "2026-01-01T10:00:00Z", "2026-01-05T23:59:59Z");
        let date = |s: &str| s.parse::<NaiveDate>().unwrap();
        assert!(MeetingFilter { title: Some("product".into()), ..Default::default() }.matches(&e));
        assert!(!MeetingFilter { title: Some("roadmap".into()), ..Default::default() }.matches(&e));
        assert!(MeetingFilter { participants: Some(vec![1, 60]), ..Default::default() }.matches(&e));
        assert!(!MeetingFilter { participants: Some(vec![1]), ..Default::default() }.matches(&e));
        assert!(
            MeetingFilter {
                created_after: Some(date("2026-01-05")),
                created_before: Some(date("2026-01-05")),
                ..Default::default()
            }
            .matches(&e)
        );
        assert!(!MeetingFilter { created_after: Some(date("2026-01-06")), ..Default::default() }.matches(&e));
        assert!(
            MeetingFilter { summary_complete: Some(true), from_calendar: Some(true), ..Default::default() }.matches(&e)
        );
        assert!(!MeetingFilter { summary_complete: Some(false), ..Default::default() }.matches(&e));
        assert!(
            !MeetingFilter { updated_after: Some("2026-01-06T00:00:00Z".parse().unwrap()), ..Default::default() }
                .matches(&e)
        );
    }
}
