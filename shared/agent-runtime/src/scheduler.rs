//! The scheduler tick (the `scheduler` function, every minute): every schedule due by now is
//! fired, skipped or passed over, exactly once per due time, and moved to its next due time.
//!
//! Per page of due schedules (the keys-only `due` index, earliest first, 100 at a time):
//! 1. The schedules are read again, consistently (one BatchGetItem): only those still at the due
//!    time the index showed are handled. Their agents are read (one BatchGetItem per account).
//! 2. Each schedule, concurrently, gets a decision for its due time: passed over (its agent is
//!    deleted), skipped (`overlap_policy: skip` and its last run still `started`, or the account
//!    at its quota of queued runs: `QuotaQueuedRuns`) or fired. The
//!    first tick to decide a due time claims it on the schedule (a conditional write); any other
//!    tick (overlapping, repeated, or completing one that died) carries out the claimed decision.
//!    A fired due time's run is recorded with an id derived from the schedule and the due time,
//!    so carrying it out twice never makes a second run.
//! 3. The fired runs go on the runner queue, ten per SendMessageBatch.
//! 4. Each schedule moves on, conditionally on still being at its due time: `last_run_*`, the
//!    merged due times counted as skipped, then `schedule.triggered` is published.
//!
//! A duplicate message (a fire carried out twice) is harmless: the worker's lease and the run's
//! status never let a run execute twice.
//!
//! **Isolation**: the sweep of lost runs is its own first step, so no due schedule can keep it
//! from running. Each schedule's decision and move is its own work: one that fails (a store
//! error, its account's agents unreadable, a panic) is logged, counted in `failed`, and moved past
//! its due time as skipped (the place it may have taken among its account's queued runs given
//! back), so it cannot hold its page's place or stop the others. A page-wide failure (the due
//! index or the queue unreachable) ends the tick; the next tick carries on from the claims.
//!
//! **Missed windows**: the next due time is computed from now, not from the due time, so a
//! schedule that missed many due times (downtime) fires once, for the oldest; the others are
//! counted in `skipped_count`.

use crate::lifecycle::{RunLifecycle, StartError, StartRun};
use crate::queue::{RunMessage, RunQueue};
use crate::resolve::RunRequest;
use crate::runs::{RunInput, RunOrigin, RunStatus, RunType};
use crate::timeouts::{MAX_QUEUED_RUN_TIMEOUT, run_timeout};
use aws_env::isolation::caught;
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use platform_data::agents::{Agent, AgentStore};
use platform_data::ids::{AccountId, AgentId, RunId, ScheduleId};
use platform_data::schedules::{Advance, DueKey, OverlapPolicy, ScheduleRecord, ScheduleStore};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use storage::StoreError;
use webhooks::publisher::Publisher;

/// Due schedules read per page.
pub const PAGE_SIZE: i32 = 100;
/// Schedules handled at once within a page.
pub const CONCURRENCY: usize = 16;

/// What one tick did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TickReport {
    pub fired: usize,
    pub skipped: usize,
    /// Passed over: the agent is deleted.
    pub passed_over: usize,
    /// Already handled by another tick.
    pub already_handled: usize,
    /// Runs lost with their process, ended by the tick's sweep (`RunLifecycle::sweep_lost`).
    pub lost_runs_ended: usize,
    /// Due times whose decision failed: logged, and moved past as skipped.
    pub failed: usize,
}

/// The scheduler.
#[derive(Clone)]
pub struct Scheduler {
    schedules: ScheduleStore,
    agents: AgentStore,
    runner: RunLifecycle,
    queue: RunQueue,
    events: Option<Publisher>,
}

/// What becomes of one due time of a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    /// The agent is deleted: nothing runs, nothing is counted.
    PassOver,
    /// The last run is still going (`overlap_policy: skip`): counted.
    Skip,
    Fire {
        run_id: RunId,
    },
    /// Another tick moved the schedule on.
    AlreadyHandled,
}

impl Decision {
    /// As the schedule's claim stores it.
    fn encode(&self) -> String {
        match self {
            Self::PassOver => "pass".into(),
            Self::Skip => "skip".into(),
            Self::Fire { run_id } => format!("fire:{run_id}"),
            Self::AlreadyHandled => "handled".into(),
        }
    }

    fn parse(claim: &str) -> Option<Self> {
        match claim {
            "pass" => Some(Self::PassOver),
            "skip" => Some(Self::Skip),
            other => other.strip_prefix("fire:").and_then(|id| id.parse().ok()).map(|run_id| Self::Fire { run_id }),
        }
    }
}

/// One result of work that may fail or panic (`caught`), its failure as text.
fn flatten<T>(outcome: Result<Result<T, StoreError>, String>) -> Result<T, String> {
    outcome.and_then(|result| result.map_err(|err| err.to_string()))
}

/// The id of a schedule's run for one due time: a UUIDv7 at the due time (so runs sort by it)
/// whose other bits are a hash of the schedule and the due time, the same in every tick.
pub fn scheduled_run_id(schedule_id: ScheduleId, due: DateTime<Utc>) -> RunId {
    let millis = u64::try_from(due.timestamp_millis()).unwrap_or(0);
    let digest = Sha256::new().chain_update(schedule_id.as_bytes()).chain_update(millis.to_be_bytes()).finalize();
    let mut bytes = [0u8; 10];
    bytes.copy_from_slice(&digest[..10]);
    RunId::from(uuid::Builder::from_unix_timestamp_millis(millis, &bytes).into_uuid())
}

impl Scheduler {
    pub fn new(schedules: ScheduleStore, agents: AgentStore, runner: RunLifecycle, queue: RunQueue) -> Self {
        Self { schedules, agents, runner, queue, events: None }
    }

    /// Times the runs it starts by `clock` (tests; a tick's time is its argument).
    pub fn with_clock(mut self, clock: aws_env::clock::Clock) -> Self {
        self.runner = self.runner.with_clock(clock);
        self
    }

    /// Publishes `schedule.triggered` through `publisher`.
    pub fn with_events(mut self, publisher: Publisher) -> Self {
        self.events = Some(publisher);
        self
    }

    /// Ends the runs lost with their process (the sweep: `RunLifecycle::sweep_lost`), then
    /// handles every schedule due at `now`.
    pub async fn tick(&self, now: DateTime<Utc>) -> Result<TickReport, StoreError> {
        let mut report = TickReport::default();
        // Every minute, the runs lost with their process are ended (their `run.failed`
        // published): first, on its own, so nothing in the due pages can keep it from running.
        match caught(self.runner.sweep_lost(now)).await {
            Ok(Ok(ended)) => report.lost_runs_ended = ended,
            Ok(Err(err)) => tracing::error!(error = %err, "the sweep of lost runs failed; the next tick tries again"),
            Err(panic) => tracing::error!(error = %panic, "the sweep of lost runs failed; the next tick tries again"),
        }
        let mut start_key = None;
        loop {
            let (page, next_key) = self.schedules.due(now, PAGE_SIZE, start_key).await?;
            self.handle_page(&page, now, &mut report).await?;
            match next_key {
                Some(key) => start_key = Some(key),
                None => break,
            }
        }
        Ok(report)
    }

    async fn handle_page(
        &self,
        page: &[DueKey],
        now: DateTime<Utc>,
        report: &mut TickReport,
    ) -> Result<(), StoreError> {
        // The index is eventually consistent: what is decided is read again, consistently, and
        // only schedules still at the due time the index showed are handled.
        let keys: Vec<(AccountId, ScheduleId)> = page.iter().map(|key| (key.account_id, key.schedule_id)).collect();
        let mut fresh = self.schedules.get_many(&keys).await?;
        fresh.retain(|schedule| {
            page.iter().any(|key| key.schedule_id == schedule.schedule_id && schedule.next_run_at == Some(key.due))
        });
        report.already_handled += page.len() - fresh.len();
        let agents = self.agents_of(&fresh).await;
        let decided: Vec<(ScheduleRecord, Result<Decision, String>)> =
            futures_util::stream::iter(fresh.into_iter().map(|schedule| {
                let agents = agents.get(&schedule.account_id);
                async move {
                    let decision = match agents {
                        Some(Ok(agents)) => {
                            let agent = agents.get(&schedule.agent_id);
                            flatten(caught(self.decide(&schedule, agent, now)).await)
                        }
                        Some(Err(err)) => Err(format!("the account's agents could not be read: {err}")),
                        None => Err("the account's agents were not read".to_owned()),
                    };
                    (schedule, decision)
                }
            }))
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut to_send = Vec::new();
        for (_, decision) in &decided {
            if let Ok(Decision::Fire { run_id }) = decision {
                to_send.push(RunMessage { run_id: *run_id });
            }
        }
        // Not sent: nothing moves on, so the next tick finds the claims and sends the runs.
        self.queue.sqs().send(&to_send).await?;
        let moved: Vec<Result<Option<Decision>, String>> =
            futures_util::stream::iter(decided.into_iter().map(|(schedule, decision)| async move {
                match decision {
                    Ok(decision) => match flatten(caught(self.move_on(&schedule, &decision, now)).await) {
                        Ok(moved) => Ok(moved.then_some(decision)),
                        // Decided and claimed: the next tick carries the claim out.
                        Err(err) => {
                            tracing::error!(schedule_id = %schedule.schedule_id, error = %err,
                                "a due schedule was not moved on; the next tick carries out its claim");
                            Err(err)
                        }
                    },
                    Err(failure) => Err(self.pass_failed(&schedule, &failure, now).await),
                }
            }))
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for outcome in moved {
            match outcome {
                Ok(Some(Decision::Fire { .. })) => report.fired += 1,
                Ok(Some(Decision::Skip)) => report.skipped += 1,
                Ok(Some(Decision::PassOver)) => report.passed_over += 1,
                Ok(Some(Decision::AlreadyHandled) | None) => report.already_handled += 1,
                // Logged where it failed; one schedule's failure does not stop the others.
                Err(_) => report.failed += 1,
            }
        }
        Ok(())
    }

    /// A schedule whose decision failed: logged, its place among the account's queued runs
    /// given back, and its due time passed as skipped (so it cannot hold its page's place).
    /// Returns the failure, as logged.
    async fn pass_failed(&self, schedule: &ScheduleRecord, failure: &str, now: DateTime<Utc>) -> String {
        tracing::error!(schedule_id = %schedule.schedule_id, account_id = %schedule.account_id, error = %failure,
            "a due schedule's decision failed; its due time is skipped");
        if let Some(due) = schedule.next_run_at {
            self.runner.give_back_queued(schedule.account_id, scheduled_run_id(schedule.schedule_id, due)).await;
        }
        if let Err(err) = flatten(caught(self.move_on(schedule, &Decision::Skip, now)).await) {
            tracing::error!(schedule_id = %schedule.schedule_id, error = %err, "a failed due schedule was not moved on");
        }
        failure.to_owned()
    }

    /// The page's agents by account: one BatchGetItem per account. An account whose agents
    /// cannot be read (a store error, a record that does not decode) fails its own schedules only.
    async fn agents_of(
        &self,
        page: &[ScheduleRecord],
    ) -> BTreeMap<AccountId, Result<BTreeMap<AgentId, Agent>, StoreError>> {
        let mut wanted: BTreeMap<AccountId, BTreeSet<AgentId>> = BTreeMap::new();
        for schedule in page {
            wanted.entry(schedule.account_id).or_default().insert(schedule.agent_id);
        }
        let mut agents = BTreeMap::new();
        for (account, ids) in wanted {
            let ids: Vec<AgentId> = ids.into_iter().collect();
            let read = self.agents.get_many(account, &ids).await;
            agents.insert(account, read.map(|found| found.into_iter().map(|agent| (agent.id, agent)).collect()));
        }
        agents
    }

    /// Decides what becomes of the schedule's due time, and makes the decision final with a
    /// claim on the schedule: the first tick to claim a due time decides it; any other tick
    /// (overlapping, repeated, or completing one that died) carries out the claimed decision.
    async fn decide(
        &self,
        schedule: &ScheduleRecord,
        agent: Option<&Agent>,
        now: DateTime<Utc>,
    ) -> Result<Decision, StoreError> {
        let Some(due) = schedule.next_run_at else { return Ok(Decision::AlreadyHandled) };
        let decision = match schedule.claim_for(due).and_then(Decision::parse) {
            Some(claimed) => claimed,
            None => {
                let decision = self.choose(schedule, agent, due, now).await?;
                if self.schedules.claim(schedule, due, &decision.encode()).await? {
                    decision
                } else {
                    let current = self.schedules.get(schedule.account_id, schedule.schedule_id).await?;
                    let claimed = match current.filter(|current| current.next_run_at == Some(due)) {
                        Some(current) => {
                            current.claim_for(due).and_then(Decision::parse).unwrap_or(Decision::AlreadyHandled)
                        }
                        None => Decision::AlreadyHandled,
                    };
                    // Another tick decided not to fire this due time: the place this one took
                    // for its run goes back. (When it fired, the run is the same one, holding the
                    // same place; when it moved on, it may have fired: the place is left to
                    // expire rather than taken from a run that holds it.)
                    if let Decision::Fire { run_id } = decision
                        && matches!(claimed, Decision::Skip | Decision::PassOver)
                    {
                        self.runner.give_back_queued(schedule.account_id, run_id).await;
                    }
                    claimed
                }
            }
        };
        if let Decision::Fire { run_id } = decision {
            // Idempotent: the run's id is the due time's; a second tick finds it recorded.
            let Some(agent) = agent else { return Ok(Decision::PassOver) };
            let start = self.start(schedule);
            let timeout = run_timeout(start.request.timeout, &agent.spec.metadata, MAX_QUEUED_RUN_TIMEOUT);
            self.runner.create_once(run_id, agent, &start, timeout).await?;
        }
        Ok(decision)
    }

    /// The decision for a due time no tick has decided yet.
    async fn choose(
        &self,
        schedule: &ScheduleRecord,
        agent: Option<&Agent>,
        due: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Decision, StoreError> {
        let Some(agent) = agent.filter(|agent| agent.deleted_at.is_none()) else {
            return Ok(Decision::PassOver);
        };
        if schedule.spec.overlap_policy == OverlapPolicy::Skip && self.last_run_is_going(schedule, now).await? {
            return Ok(Decision::Skip);
        }
        let run_id = scheduled_run_id(schedule.schedule_id, due);
        // A place among the account's queued runs, named after the run: a tick that carries out
        // this decision again holds the same one.
        let timeout =
            run_timeout(schedule.spec.timeout.map(Duration::from_secs), &agent.spec.metadata, MAX_QUEUED_RUN_TIMEOUT);
        match self.runner.lease_queued(schedule.account_id, run_id, timeout).await {
            Ok(()) => Ok(Decision::Fire { run_id }),
            Err(StartError::Quota(full)) => {
                tracing::warn!(schedule_id = %schedule.schedule_id, quota = full.quota.name, limit = full.quota.limit, "account at its quota of queued runs; due time skipped");
                Ok(Decision::Skip)
            }
            // Fired all the same: its worker records it failed with `budget_exceeded`, so the
            // schedule shows why it did not run.
            Err(StartError::Budget(_)) => Ok(Decision::Fire { run_id }),
            Err(StartError::Store(err)) => Err(err),
        }
    }

    /// Whether the schedule's last run is still `started`. It is read again when the schedule
    /// says so: a run lost with its process is marked failed by that read, recorded on the
    /// schedule, and does not block it.
    async fn last_run_is_going(&self, schedule: &ScheduleRecord, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let (Some("started"), Some(run_id)) = (schedule.last_run_status.as_deref(), schedule.last_run_id) else {
            return Ok(false);
        };
        match self.runner.runs().get(run_id, now).await? {
            Some(run) if run.status == RunStatus::Started => Ok(true),
            Some(run) => {
                let status = run.status.as_str();
                self.schedules.record_end(schedule.account_id, schedule.schedule_id, run_id, status).await?;
                Ok(false)
            }
            None => Ok(false),
        }
    }

    /// What a run of `schedule` is asked.
    pub fn start(&self, schedule: &ScheduleRecord) -> StartRun {
        let message = schedule.spec.message.clone();
        StartRun {
            origin: RunOrigin {
                run_type: RunType::Schedule,
                input: RunInput { message: message.clone(), files: Vec::new() },
                schedule_id: Some(schedule.schedule_id),
                session_id: None,
                parent: None,
            },
            request: RunRequest {
                message,
                timeout: schedule.spec.timeout.map(Duration::from_secs),
                ..RunRequest::default()
            },
        }
    }

    /// Moves the schedule past its due time; `false` when another tick moved it first. Due
    /// times that also passed by now (downtime, a late tick) are merged into this one and
    /// counted as skipped: the next due time is the first after now.
    async fn move_on(
        &self,
        schedule: &ScheduleRecord,
        decision: &Decision,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let Some(due) = schedule.next_run_at else { return Ok(false) };
        let next = schedule.next_due(now.max(due));
        let merged = schedule.passed_since(due, now);
        let change = match decision {
            Decision::AlreadyHandled => return Ok(false),
            Decision::PassOver => Advance::Quietly,
            Decision::Skip => Advance::Skipped { merged },
            Decision::Fire { run_id } => Advance::Fired { run_id: *run_id, at: due, merged },
        };
        let moved = self.schedules.advance(schedule, due, next, change).await?;
        if moved && let Decision::Fire { run_id } = decision {
            self.announce(schedule, *run_id, due, false).await;
        }
        Ok(moved)
    }

    /// Publishes `schedule.triggered` (logged, not returned, when it fails).
    pub async fn announce(&self, schedule: &ScheduleRecord, run_id: RunId, due: DateTime<Utc>, manual: bool) {
        let Some(publisher) = &self.events else { return };
        let data = serde_json::json!({
            "schedule_id": schedule.schedule_id,
            "agent_id": schedule.agent_id,
            "run_id": run_id,
            "due_at": due,
            "manual": manual,
        });
        if let Err(err) = publisher.publish(schedule.account_id, "schedule.triggered", data, self.runner.now()).await {
            tracing::error!(schedule_id = %schedule.schedule_id, error = %err, "schedule.triggered not published");
        }
    }

    /// Runs `schedule` now (a manual trigger): recorded as a run of the schedule and queued,
    /// whatever its overlap policy; its due time does not change.
    pub async fn trigger(
        &self,
        schedule: &ScheduleRecord,
        agent: &Agent,
    ) -> Result<crate::runs::RunRecord, crate::lifecycle::StartError> {
        let start = self.start(schedule);
        let record = self.runner.enqueue(agent, &start, &self.queue).await?;
        self.schedules.record_trigger(schedule, record.run_id, record.queued_at()).await?;
        self.announce(schedule, record.run_id, record.queued_at(), true).await;
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scheduled_run_id_is_the_same_for_a_due_time_and_sorts_by_it() {
        let schedule = ScheduleId::new_v4();
        let due = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        assert_eq!(scheduled_run_id(schedule, due), scheduled_run_id(schedule, due));
        assert_ne!(scheduled_run_id(schedule, due), scheduled_run_id(ScheduleId::new_v4(), due));
        let later = scheduled_run_id(schedule, due + chrono::Duration::minutes(1));
        assert!(later > scheduled_run_id(schedule, due));
        assert_eq!(later.into_uuid().get_version_num(), 7);
    }

    #[test]
    fn a_claimed_decision_reads_back_as_itself() {
        let run_id = RunId::now_v7();
        for decision in [Decision::PassOver, Decision::Skip, Decision::Fire { run_id }] {
            assert_eq!(Decision::parse(&decision.encode()), Some(decision));
        }
        assert_eq!(Decision::parse("fire:not-a-uuid"), None);
        assert_eq!(Decision::parse("handled"), None);
    }
}
