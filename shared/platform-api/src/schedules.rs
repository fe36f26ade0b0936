//! The schedule routes (`schedules` function), behind the backend's gate:
//!
//! - `POST /agents/{agent_id}/schedule` (201), `GET /agents/schedules` (`limit`, `page`,
//!   `agent_id`), `GET`/`PUT`/`DELETE /agents/schedules/{schedule_id}` (DELETE: `data: null`),
//!   `POST /agents/schedules/{schedule_id}/trigger` (202: a run of the schedule, queued now).
//! - 400 for a configuration that cannot work (an unknown time zone, an expression that never
//!   fires, `end_at` not after `start_at`); 422 for an invalid format (a malformed expression,
//!   wrong field types, a path id that is not a UUID); 404 for an unknown, deleted or another
//!   account's agent or schedule.
//!
//! Every answer carries the schedule's `next_run_at` and `next_runs` (its next five due times).
//! Body fields and the firing policy are in `docs/schedules.md`.
//!
//! DynamoDB calls: the gate, then create: 1 GetItem (agent) + 1 PutItem; get: 1 GetItem; list:
//! 1 Query per MB of the account's schedules (+ 1 GetItem of the agent with `agent_id`); replace:
//! 1 GetItem + 1 conditional UpdateItem (again if a tick moved it meanwhile); delete: 1 DeleteItem; trigger: 2 GetItem (schedule, agent) + the queued
//! run's (1 PutItem, 1 SendMessage) + 1 UpdateItem.

use crate::envelope::{ApiError, ErrorCode, PageRequest, path_id, success, uuid_param};
use crate::gate::{Access, Gate};
use crate::records::active_record;
use crate::settings;
use agent_runtime::scheduler::Scheduler;
use aws_env::settings::{Lookup, SettingError, required};
use chrono::{DateTime, Utc};
use http::{Method, StatusCode};
use http_api::routing::segments_under;
use http_api::{Body, HttpFunction, Params, Request, Response, ResponseFuture};
use platform_data::agents::AgentStore;
use platform_data::api_keys::Caller;
use platform_data::ids::{AccountId, AgentId, ScheduleId};
use platform_data::schedules::{ScheduleRecord, ScheduleStore, parse_schedule};
use platform_data::validation::{ProblemKind, Problems};
use serde_json::{Map, Value};

/// How many due times a schedule's answers list.
pub const NEXT_RUNS: usize = 5;

/// The schedules function.
pub struct SchedulesService {
    gate: Gate,
    schedules: ScheduleStore,
    agents: AgentStore,
    scheduler: Scheduler,
}

impl SchedulesService {
    pub fn new(gate: Gate, schedules: ScheduleStore, agents: AgentStore, scheduler: Scheduler) -> Self {
        Self { gate, schedules, agents, scheduler }
    }

    /// A service configured from settings (see `template.yaml`).
    pub fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Self, SettingError> {
        let scheduler = scheduler_from_settings(aws, lookup)?;
        let db = aws.dynamodb();
        let schedules = ScheduleStore::new(db.clone(), required(lookup, settings::SCHEDULES_TABLE)?).with_quota(
            storage::quota::Counters::new(db.clone(), required(lookup, settings::QUOTAS_TABLE)?),
            settings::quota(lookup, "schedules", settings::QUOTA_SCHEDULES, 500)?,
        );
        Ok(Self::new(
            Gate::from_settings(aws, lookup)?,
            schedules,
            AgentStore::new(db, required(lookup, settings::AGENTS_TABLE)?),
            scheduler,
        ))
    }

    /// Reads the time, its triggered runs' included, from `clock` (tests).
    pub fn with_clock(mut self, clock: aws_env::clock::Clock) -> Self {
        self.gate = self.gate.with_clock(std::sync::Arc::clone(&clock));
        self.scheduler = self.scheduler.with_clock(clock);
        self
    }

    async fn route(&self, caller: Caller, request: Request) -> Result<Response<Body>, ApiError> {
        let path = request.uri().path().to_owned();
        let segments = segments_under(&path, "/agents").ok_or_else(|| ApiError::not_found("resource"))?;
        let method = request.method().clone();
        let account = caller.account_id;
        match (method, segments.as_slice()) {
            (Method::POST, [agent_id, "schedule"]) => {
                self.create(account, path_id(agent_id, "agent_id")?, &request).await
            }
            (other, [_, "schedule"]) => Err(ApiError::method_not_allowed(&other, "POST")),
            (Method::GET, ["schedules"]) => self.list(account, &Params::from_query(request.uri())).await,
            (other, ["schedules"]) => Err(ApiError::method_not_allowed(&other, "GET")),
            (Method::GET, ["schedules", id]) => {
                let schedule = self.existing(account, path_id(id, "schedule_id")?).await?;
                Ok(success(StatusCode::OK, self.view(&schedule), "Schedule retrieved"))
            }
            (Method::PUT, ["schedules", id]) => self.replace(account, path_id(id, "schedule_id")?, &request).await,
            (Method::DELETE, ["schedules", id]) => {
                let id = path_id(id, "schedule_id")?;
                if !self.schedules.delete(account, id).await? {
                    return Err(ApiError::not_found("schedule"));
                }
                tracing::info!(schedule_id = %id, %account, "schedule deleted");
                Ok(success(StatusCode::OK, Value::Null, "Schedule deleted"))
            }
            (other, ["schedules", _]) => Err(ApiError::method_not_allowed(&other, "GET, PUT, DELETE")),
            (Method::POST, ["schedules", id, "trigger"]) => self.trigger(account, path_id(id, "schedule_id")?).await,
            (other, ["schedules", _, "trigger"]) => Err(ApiError::method_not_allowed(&other, "POST")),
            _ => Err(ApiError::not_found("resource")),
        }
    }

    async fn create(
        &self,
        account: AccountId,
        agent_id: AgentId,
        request: &Request,
    ) -> Result<Response<Body>, ApiError> {
        let spec = parse_schedule(request.body().as_ref(), None).map_err(refused)?;
        active_record(&self.agents, account, agent_id, "agent").await?;
        let now = self.gate.now();
        let mut schedule = ScheduleRecord::new(account, agent_id, spec, now);
        schedule.set_next(schedule.next_due(now));
        never_fires(&schedule, now)?;
        self.schedules.create(&schedule).await?.map_err(ApiError::quota_reached)?;
        tracing::info!(schedule_id = %schedule.schedule_id, %agent_id, %account, "schedule created");
        Ok(success(StatusCode::CREATED, self.view(&schedule), "Schedule created"))
    }

    async fn list(&self, account: AccountId, params: &Params) -> Result<Response<Body>, ApiError> {
        let mut problems = Map::new();
        let page = PageRequest::from_params(params, &mut problems);
        let agent_id = uuid_param(params, "agent_id", &mut problems);
        if !problems.is_empty() {
            return Err(ApiError::validation("Invalid query parameters.", problems));
        }
        let Some(agent_id) = agent_id else {
            // The page's depth of the account's partition, the counter as the total.
            let (schedules, total) = self.schedules.page(account, page.offset(), page.limit).await?;
            let data = schedules.iter().map(|schedule| self.view(schedule)).collect();
            return Ok(page.respond_page(data, total, "Schedules retrieved"));
        };
        active_record(&self.agents, account, agent_id, "agent").await?;
        // One agent's: the account's schedules read and filtered (bounded by their quota).
        let schedules = self.schedules.list(account, Some(agent_id)).await?;
        Ok(page.respond(schedules.iter().map(|schedule| self.view(schedule)), schedules.len(), "Schedules retrieved"))
    }

    /// PUT: the fields sent replace the stored ones (others are kept). The next due time is
    /// computed again from now, except that a due time that has passed and is still a due time
    /// of the new schedule is kept, so the next tick fires it. The write is conditional on the
    /// due time read, so it never undoes a tick's move (tried again, up to 3 times; then 409).
    async fn replace(&self, account: AccountId, id: ScheduleId, request: &Request) -> Result<Response<Body>, ApiError> {
        for _ in 0..3 {
            let mut schedule = self.existing(account, id).await?;
            let read_next = schedule.next_run_at;
            schedule.spec = parse_schedule(request.body().as_ref(), Some(&schedule.spec)).map_err(refused)?;
            let now = self.gate.now();
            schedule.updated_at = now;
            let pending = read_next.filter(|due| {
                *due <= now
                    && due
                        .checked_sub_signed(chrono::Duration::milliseconds(1))
                        .is_some_and(|before| schedule.next_due(before) == Some(*due))
            });
            schedule.set_next(pending.or_else(|| schedule.next_due(now)));
            never_fires(&schedule, now)?;
            if self.schedules.update_spec(&schedule, read_next).await? {
                tracing::info!(schedule_id = %id, %account, "schedule replaced");
                return Ok(success(StatusCode::OK, self.view(&schedule), "Schedule updated"));
            }
        }
        Err(ApiError::new(ErrorCode::Conflict, "The schedule kept changing while it was updated; try again."))
    }

    /// Runs the schedule now: a run of the schedule (`run_type: schedule`), queued, whatever its
    /// overlap policy; the due times do not change.
    async fn trigger(&self, account: AccountId, id: ScheduleId) -> Result<Response<Body>, ApiError> {
        let schedule = self.existing(account, id).await?;
        let agent = active_record(&self.agents, account, schedule.agent_id, "agent").await?;
        let run = self.scheduler.trigger(&schedule, &agent).await?;
        tracing::info!(schedule_id = %id, run_id = %run.run_id, "schedule triggered");
        Ok(success(StatusCode::ACCEPTED, run.view(), "Schedule triggered"))
    }

    async fn existing(&self, account: AccountId, id: ScheduleId) -> Result<ScheduleRecord, ApiError> {
        self.schedules.get(account, id).await?.ok_or_else(|| ApiError::not_found("schedule"))
    }

    fn view(&self, schedule: &ScheduleRecord) -> Value {
        let now: DateTime<Utc> = self.gate.now();
        schedule.view(Some(schedule.next_runs(now, NEXT_RUNS)))
    }
}

impl HttpFunction for SchedulesService {
    fn handle(&self, request: Request) -> ResponseFuture<'_> {
        let access = Access::by_method(&request);
        Box::pin(self.gate.serve(request, access, |caller, request| self.route(caller, request)))
    }
}

/// The scheduler (the `scheduler` function, and manual triggers), configured from settings.
pub fn scheduler_from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Scheduler, SettingError> {
    let db = aws.dynamodb();
    let runner = crate::agent_runs::lifecycle_from_settings(aws, lookup)?;
    let queue = agent_runtime::queue::RunQueue::new(std::sync::Arc::new(queues::SqsQueue::new(
        aws.sqs(),
        required(lookup, settings::RUNNER_QUEUE_URL)?,
    )));
    let events = crate::webhooks::publisher_from_settings(aws, lookup)?;
    Ok(Scheduler::new(
        ScheduleStore::new(db.clone(), required(lookup, settings::SCHEDULES_TABLE)?),
        AgentStore::new(db, required(lookup, settings::AGENTS_TABLE)?),
        runner,
        queue,
    )
    .with_events(events))
}

/// 400 for an enabled schedule with no due time left: its expression's years are past, or its
/// window (`start_at`..`end_at`) holds none.
fn never_fires(schedule: &ScheduleRecord, now: DateTime<Utc>) -> Result<(), ApiError> {
    if !schedule.spec.enabled || schedule.next_run_at.is_some() {
        return Ok(());
    }
    let (field, issue) = match schedule.spec.end_at {
        Some(end) if end <= now => ("end_at", "is in the past: the schedule would never fire"),
        Some(_) => ("cron_expression", "has no due time between now (or start_at) and end_at"),
        None => ("cron_expression", "has no due time after now"),
    };
    Err(ApiError::new(ErrorCode::BadRequest, "The schedule cannot work as configured.").with_detail(field, issue))
}

/// A refused schedule body: 400 when the configuration cannot work, 422 when it is malformed.
fn refused(problems: Problems) -> ApiError {
    let (code, message) = match problems.kind {
        ProblemKind::BadRequest => (ErrorCode::BadRequest, "The schedule cannot work as configured."),
        ProblemKind::Validation => (ErrorCode::ValidationError, "The schedule is invalid."),
    };
    let details: Map<String, Value> =
        problems.fields.into_iter().map(|(field, issue)| (field, Value::String(issue))).collect();
    let mut error = ApiError::new(code, message);
    error.details = details;
    error
}
