//! How long runs are kept, and an agent's run counts by day and filter cell.
//!
//! A run is kept from its creation day (its id's UUIDv7 time, UTC) for `Retention` days: its
//! record's `expires_at` (the TTL attribute) is midnight after the last day, and reads treat it
//! as gone from then on, whether or not TTL has deleted it yet (TTL deletes within days, and
//! DynamoDB Local never does).
//!
//! `RunCountsTable` (key `agent_id` + `day`) holds one item per agent and creation day: one
//! number per **cell**, the runs of that day with one status and type (`failed.api`), and per
//! schedule cell (`{schedule_id}.failed.schedule`). The transactions that create a run, change its
//! status (its end, a lost run's settle by the sweep) and purge it change its cell in the same
//! write. Every bucket expires with its runs (the same `expires_at`), and a read takes only the
//! days still kept (a key range), so a total counts exactly the runs reads return. The `TALLY`
//! item counts the agent's runs stored before counts were kept (no `expires_at`, never expire).

use super::{RunFilter, RunRecord, RunStatus, RunType};
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Days, NaiveDate, NaiveTime, Utc};
use platform_data::ids::{AgentId, RunId, ScheduleId};
use std::collections::HashMap;
use storage::Item;

/// The runs kept by default, in days (the template's `RunRetentionDays`).
pub const DEFAULT_RETENTION_DAYS: u32 = 90;

/// The least retention: a run's record outlives its events and journal (30 days), so a stream
/// that can still be resumed always has its run.
pub const MIN_RETENTION_DAYS: u32 = 30;

/// The sort key of the item counting an agent's runs from before counts were kept. It sorts
/// after every day, so the Query of the kept days reads it too.
pub const TALLY: &str = "TALLY";

const STATUSES: [RunStatus; 3] = [RunStatus::Started, RunStatus::Success, RunStatus::Failed];
const TYPES: [RunType; 3] = [RunType::Api, RunType::Queue, RunType::Schedule];

/// How many days runs are kept after the day they were created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    days: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Self { days: DEFAULT_RETENTION_DAYS }
    }
}

impl Retention {
    /// Runs kept `days` days; below `MIN_RETENTION_DAYS` is refused.
    pub fn days(days: u32) -> Result<Self, String> {
        if days < MIN_RETENTION_DAYS {
            return Err(format!("must be at least {MIN_RETENTION_DAYS} (the days run events are kept)"));
        }
        Ok(Self { days })
    }

    /// When run `run_id` stops being kept: midnight (UTC) after its last kept day.
    pub fn expires_at(self, run_id: RunId) -> DateTime<Utc> {
        let last = day_of(run_id).checked_add_days(Days::new(u64::from(self.days) + 1)).unwrap_or(NaiveDate::MAX);
        last.and_time(NaiveTime::MIN).and_utc()
    }

    /// The first creation day whose runs are still kept at `now`.
    pub fn first_kept_day(self, now: DateTime<Utc>) -> NaiveDate {
        now.date_naive().checked_sub_days(Days::new(u64::from(self.days))).unwrap_or(NaiveDate::MIN)
    }

    /// The least run id still kept at `now` (as text, which sorts as the ids' times do): a key
    /// condition `run_id >= bound` leaves the runs past their retention out of a Query.
    pub fn first_kept_id(self, now: DateTime<Utc>) -> String {
        let start = self.first_kept_day(now).and_time(NaiveTime::MIN).and_utc();
        let millis = u64::try_from(start.timestamp_millis()).unwrap_or(0);
        uuid::Builder::from_unix_timestamp_millis(millis, &[0; 10]).into_uuid().to_string()
    }
}

/// The UTC day of run `run_id`'s creation (its UUIDv7 time; 1970-01-01 for an id without one).
pub fn day_of(run_id: RunId) -> NaiveDate {
    let seconds = run_id.into_uuid().get_timestamp().map_or(0, |stamp| stamp.to_unix().0);
    DateTime::from_timestamp(i64::try_from(seconds).unwrap_or(0), 0).unwrap_or_default().date_naive()
}

/// A bucket's sort key: its day.
pub fn day_key(day: NaiveDate) -> String {
    day.format("%Y-%m-%d").to_string()
}

/// The cell of runs of one status and type (`failed.api`).
pub fn cell(status: RunStatus, run_type: RunType) -> String {
    format!("{}.{}", status.as_str(), type_name(run_type))
}

/// The cell of a schedule's runs of one status and type.
pub fn schedule_cell(schedule_id: ScheduleId, status: RunStatus, run_type: RunType) -> String {
    format!("{schedule_id}.{}", cell(status, run_type))
}

fn type_name(run_type: RunType) -> &'static str {
    match run_type {
        RunType::Api => "api",
        RunType::Queue => "queue",
        RunType::Schedule => "schedule",
    }
}

/// The cells a run is counted in with `status`: its type's, and its schedule's.
pub fn cells_of(run: &RunRecord, status: RunStatus) -> Vec<String> {
    let mut cells = vec![cell(status, run.run_type)];
    if let Some(schedule_id) = run.schedule_id {
        cells.push(schedule_cell(schedule_id, status, run.run_type));
    }
    cells
}

/// The cells whose runs match `filter` (a schedule's cells when it names one), each one index
/// partition: at most 9.
pub fn cells_matching(filter: &RunFilter) -> Vec<String> {
    let mut cells = Vec::new();
    for status in STATUSES.into_iter().filter(|status| filter.status.is_none_or(|wanted| wanted == *status)) {
        for run_type in TYPES.into_iter().filter(|run_type| filter.run_type.is_none_or(|wanted| wanted == *run_type)) {
            cells.push(match filter.schedule_id {
                Some(schedule_id) => schedule_cell(schedule_id, status, run_type),
                None => cell(status, run_type),
            });
        }
    }
    cells
}

/// An index partition of an agent's cell: `{agent_id}#{cell}`.
pub fn partition(agent_id: AgentId, cell: &str) -> String {
    format!("{agent_id}#{cell}")
}

/// An agent's runs from before counts were kept (its `TALLY` item).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// How many such runs it has (meaningful once `tallied`; before, only their purges).
    pub legacy: Option<i64>,
    /// Whether they were counted, so that `legacy` is their number.
    pub tallied: bool,
    /// The last purge of such a run.
    pub legacy_purged_at: Option<DateTime<Utc>>,
}

impl Tally {
    /// Whether every run of the agent is counted and indexed by cell: tallied, and none from
    /// before counts.
    pub fn all_counted(&self) -> bool {
        self.tallied && self.legacy.unwrap_or(0) <= 0
    }
}

/// An agent's run counts as read: per cell, the sum over the kept days, and its tally.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunCounts {
    pub cells: HashMap<String, i64>,
    pub tally: Tally,
}

impl RunCounts {
    /// The counts in the items of a Query of the agent's kept days and its tally.
    pub fn from_items(items: &[Item]) -> Self {
        let mut counts = Self::default();
        let number = |item: &Item, name: &str| item.get(name)?.as_n().ok()?.parse::<i64>().ok();
        for item in items {
            if item.get("day").and_then(|day| day.as_s().ok()).map(String::as_str) == Some(TALLY) {
                counts.tally = Tally {
                    legacy: number(item, "legacy"),
                    tallied: matches!(item.get("tallied"), Some(AttributeValue::Bool(true))),
                    legacy_purged_at: number(item, "legacy_purged_at").and_then(DateTime::from_timestamp_millis),
                };
                continue;
            }
            for (name, value) in item {
                let Ok(Ok(value)) = value.as_n().map(|text| text.parse::<i64>()) else { continue };
                if name.contains('.') {
                    *counts.cells.entry(name.clone()).or_default() += value;
                }
            }
        }
        counts
    }

    /// The runs counted in `cell` (never negative).
    pub fn of(&self, cell: &str) -> usize {
        usize::try_from(self.cells.get(cell).copied().unwrap_or(0)).unwrap_or(0)
    }

    /// The runs counted in `cells`.
    pub fn sum(&self, cells: &[String]) -> usize {
        cells.iter().map(|cell| self.of(cell)).sum()
    }

    /// Every run counted (each once: the status-and-type cells, not the schedules').
    pub fn runs(&self) -> usize {
        self.sum(&cells_matching(&RunFilter::default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn run_at(time: DateTime<Utc>) -> RunId {
        let millis = u64::try_from(time.timestamp_millis()).unwrap();
        RunId::from(uuid::Builder::from_unix_timestamp_millis(millis, &[0xff; 10]).into_uuid())
    }

    #[test]
    fn a_run_is_kept_through_its_last_day_and_no_longer() {
        let retention = Retention::days(30).unwrap();
        let created = Utc.with_ymd_and_hms(2026, 11, 26, 23, 59, 0).unwrap();
        let run_id = run_at(created);
        assert_eq!(day_of(run_id), created.date_naive());
        let expires = retention.expires_at(run_id);
        assert_eq!(expires, Utc.with_ymd_and_hms(2026, 12, 27, 0, 0, 0).unwrap());
        let last_moment = expires - chrono::Duration::milliseconds(1);
        assert!(retention.first_kept_day(last_moment) <= day_of(run_id), "kept until its expiry");
        assert!(retention.first_kept_day(expires) > day_of(run_id), "gone from its expiry");
        assert!(Retention::days(29).is_err());
    }

    #[test]
    fn cells_name_each_status_and_type_once() {
        assert_eq!(cells_matching(&RunFilter::default()).len(), 9);
        let failed = RunFilter { status: Some(RunStatus::Failed), ..RunFilter::default() };
        assert_eq!(cells_matching(&failed), ["failed.api", "failed.queue", "failed.schedule"]);
        let schedule = ScheduleId::now_v7();
        let both = RunFilter { status: Some(RunStatus::Success), run_type: None, schedule_id: Some(schedule) };
        assert_eq!(cells_matching(&both).len(), 3);
        assert!(cells_matching(&both).iter().all(|cell| cell.starts_with(&schedule.to_string())));
    }

    proptest! {
        /// Whatever the moment, the id bound and the day bound agree with the run's own expiry:
        /// a run is read (its id at or above the bound) exactly while it is kept.
        #[test]
        fn the_id_bound_keeps_exactly_the_runs_not_expired(
            created_ms in 0i64..4_000_000_000_000,
            later_ms in 0i64..200_000_000_000,
            days in 30u32..400,
            tail in any::<[u8; 10]>(),
        ) {
            let retention = Retention::days(days).unwrap();
            let created = DateTime::from_timestamp_millis(created_ms).unwrap();
            let run_id = RunId::from(
                uuid::Builder::from_unix_timestamp_millis(u64::try_from(created_ms).unwrap(), &tail).into_uuid(),
            );
            let now = created + chrono::Duration::milliseconds(later_ms);
            let kept = now < retention.expires_at(run_id);
            prop_assert_eq!(run_id.to_string() >= retention.first_kept_id(now), kept);
            prop_assert_eq!(day_of(run_id) >= retention.first_kept_day(now), kept);
        }
    }
}
