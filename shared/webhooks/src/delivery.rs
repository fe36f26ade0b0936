//! The delivery worker: one queued message is one HTTP attempt of one delivery.
//!
//! The body is `{type, timestamp, data}`, with `webhook-id` (the event id, the same on every
//! attempt), `webhook-timestamp` (the attempt's time) and `webhook-signature` (one `v1,`
//! signature per valid secret: two during a rotation's overlap). 15 s timeout, redirects not
//! followed, addresses checked after DNS resolution. Only 2xx is success; 410 disables the
//! endpoint at once; other failures retry on the schedule of `policy`, by making the SQS message
//! visible again after the wait (SQS message delays stop at 15 minutes, visibility does not).
//!
//! **Fair pool**: with an `InFlight` bound (`fairness`), an attempt first takes one of its
//! endpoint owner's places; an owner at its bound has the delivery deferred (sent again as a new
//! message after a few seconds, no attempt made or counted). An endpoint whose attempts keep
//! timing out is paced (`policy::Pace`): shorter attempts, longer waits, disabled sooner.

use crate::audience::{self, Audience};
use crate::endpoints::UrlPolicy;
use crate::events::payload;
use crate::fairness::InFlight;
use crate::messages::DeliveryMessage;
use crate::owner::Owner;
use crate::policy::{Pace, next_retry, parse_retry_after};
use crate::publisher::Publisher;
use crate::signing::signature_header;
use crate::store::{Attempt, Delivery, DeliveryStatus, Endpoint, Event, Trigger};
use aws_env::clock::Clock;
use chrono::{DateTime, SubsecRound, Utc};
use platform_data::StoreError;
use platform_data::ids::WebhookEndpointId;
use platform_data::secrets::RecordSecrets;
use queues::ReceivedMessage;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Limit of one attempt.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);

/// Bytes of a response body kept with the attempt.
pub const MAX_RESPONSE_BODY: usize = 1024;

/// Bytes of an attempt's error kept (an error can quote the endpoint's URL).
pub const MAX_ERROR: usize = 512;

/// `user-agent` of deliveries.
pub const USER_AGENT: &str = concat!("meeting-agent-platform-webhooks/", env!("CARGO_PKG_VERSION"));

/// An endpoint's signing secrets as stored in Secrets Manager.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointSecrets {
    pub current: String,
    /// The secret before the last rotation, valid until `previous_expires_at`.
    pub previous: Option<String>,
    pub previous_expires_at: Option<DateTime<Utc>>,
}

impl EndpointSecrets {
    /// The secrets that sign at `now`.
    pub fn signing(&self, now: DateTime<Utc>) -> Vec<&str> {
        let mut secrets = vec![self.current.as_str()];
        if let (Some(previous), Some(until)) = (&self.previous, self.previous_expires_at)
            && now < until
        {
            secrets.push(previous);
        }
        secrets
    }
}

/// What to do with the message after handling it.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Handled for good (delivered, failed for good, or nothing to do): delete the message.
    Done,
    /// Retry after this wait: the message stays on the queue, invisible until then.
    RetryAfter(Duration),
}

/// Where the jitter comes from (tests fix it, and the clock).
pub type Jitter = Arc<dyn Fn() -> f64 + Send + Sync>;

/// The delivery worker.
pub struct Deliverer {
    pub publisher: Publisher,
    pub secrets: RecordSecrets<WebhookEndpointId>,
    pub policy: UrlPolicy,
    pub clock: Clock,
    pub jitter: Jitter,
    client: outbound::Client,
    /// The limit of an attempt of an endpoint that is not slow (`policy::Pace`).
    attempt_timeout: Duration,
    /// The bound on each owner's attempts in flight; none: unbounded.
    in_flight: Option<InFlight>,
    /// Who may receive meeting events; none: external applications are sent nothing.
    audience: Option<Arc<dyn Audience>>,
}

/// How long past its attempt's limit an in-flight place is kept when its worker dies.
const IN_FLIGHT_MARGIN: Duration = Duration::from_secs(30);

/// The longest a deferred delivery waits before it asks for a place again.
const MAX_DEFER: Duration = Duration::from_secs(15);

impl Deliverer {
    pub fn new(
        publisher: Publisher,
        secrets: RecordSecrets<WebhookEndpointId>,
        policy: UrlPolicy,
        clock: Clock,
        jitter: Jitter,
    ) -> Self {
        let client = delivery_client(&policy);
        Self {
            publisher,
            secrets,
            policy,
            clock,
            jitter,
            client,
            attempt_timeout: ATTEMPT_TIMEOUT,
            in_flight: None,
            audience: None,
        }
    }

    /// The same worker, delivering organizations' meeting events to the applications `audience`
    /// lets receive them.
    pub fn with_audience(mut self, audience: Arc<dyn Audience>) -> Self {
        self.audience = Some(audience);
        self
    }

    /// The same worker, each owner with at most `in_flight.limit()` attempts at once.
    pub fn with_in_flight(mut self, in_flight: InFlight) -> Self {
        self.in_flight = Some(in_flight);
        self
    }

    /// Now, at the millisecond precision records store and show.
    fn now(&self) -> DateTime<Utc> {
        (self.clock)().trunc_subsecs(3)
    }

    /// The same worker with another attempt timeout (tests use a short one).
    pub fn with_attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// Handles a batch concurrently; returns the ids of messages to retry later (SQS partial
    /// batch failure), after making each visible again at its retry time.
    pub async fn handle_batch(&self, messages: &[ReceivedMessage]) -> Vec<String> {
        // Handled together: a batch's deliveries wait on their receivers concurrently.
        let outcomes = futures_util::future::join_all(messages.iter().map(|message| self.handle(message))).await;
        let mut retries = Vec::new();
        for (message, outcome) in messages.iter().zip(outcomes) {
            match outcome {
                Ok(Outcome::Done) => {}
                Ok(Outcome::RetryAfter(wait)) => {
                    if let Err(err) = self.publisher.queue.retry_later(&message.receipt_handle, wait).await {
                        tracing::error!(error = %err, "retry visibility not set; SQS retries at its own timeout");
                    }
                    retries.push(message.message_id.clone());
                }
                Err(err) => {
                    tracing::error!(error = %err, message_id = %message.message_id, "delivery not handled; retried by SQS");
                    retries.push(message.message_id.clone());
                }
            }
        }
        retries
    }

    /// Handles one queued delivery.
    pub async fn handle(&self, message: &ReceivedMessage) -> Result<Outcome, StoreError> {
        let Ok(queued) = serde_json::from_str::<DeliveryMessage>(&message.body) else {
            tracing::error!(message_id = %message.message_id, "unreadable delivery message dropped");
            return Ok(Outcome::Done);
        };
        let store = &self.publisher.store;
        let context =
            store.delivery_context(&queued.owner, queued.delivery_id, queued.endpoint_id, queued.event_id).await?;
        let Some(context) = context else {
            return Ok(Outcome::Done);
        };
        let mut delivery = context.delivery;
        let now = self.now();
        // A scheduled message attempts only a pending delivery, and only while it holds the
        // delivery's lease: once the sweeper queued it again, the sweeper's message does.
        if queued.trigger == Trigger::Scheduled
            && (delivery.status != DeliveryStatus::Pending || queued.lease != delivery.lease)
        {
            return Ok(Outcome::Done);
        }
        if delivery.is_fan_out() {
            return self.fan_out(delivery, context.event, now).await;
        }
        let (Some(endpoint), Some(event)) = (context.endpoint, context.event) else {
            return self.give_up(delivery, now).await;
        };
        if !endpoint.spec.enabled || !self.may_deliver(&endpoint, &event).await? {
            return self.give_up(delivery, now).await;
        }
        let secrets = match self.secrets.get(endpoint.owner.secret_path(), endpoint.id).await? {
            Some(text) => serde_json::from_str::<EndpointSecrets>(&text).ok(),
            None => None,
        };
        let Some(secrets) = secrets else {
            tracing::error!(endpoint_id = %endpoint.id, "endpoint has no signing secret");
            return self.give_up(delivery, now).await;
        };

        let owner = endpoint.owner.clone();
        let pace = Pace { timeouts_in_a_row: endpoint.timeouts_in_a_row };
        let limit = pace.attempt_timeout(self.attempt_timeout);
        if let Some(in_flight) = &self.in_flight {
            let until = chrono::Duration::from_std(limit + IN_FLIGHT_MARGIN).map_or(now, |span| now + span);
            if let Err(full) = in_flight.take(&owner, &message.message_id, until, now).await? {
                return Ok(self.defer(&queued, full.retry_after_seconds).await);
            }
        }
        let body = payload(&event.event_type, event.timestamp, &event.data);
        let (mut attempt, retry_after, timed_out) =
            self.attempt(&endpoint, &event.id.to_string(), &body, &secrets, queued.trigger, limit).await;
        if let Some(in_flight) = &self.in_flight {
            in_flight.give_back(&owner, &message.message_id).await;
        }
        attempt.error = attempt.error.map(|error| truncate(error, MAX_ERROR));
        let status_code = attempt.status_code;
        let jitter = (self.jitter)();
        let pace = Pace::after(pace.timeouts_in_a_row, timed_out);
        // Record the attempt; if another attempt of this delivery was recorded meanwhile (a
        // replay beside a retry), read it again and add this one to it.
        let mut outcome = record(&mut delivery, attempt.clone(), retry_after, queued.trigger, now, jitter, pace);
        let mut tries = 0;
        while !store.update_delivery(&delivery).await? {
            tries += 1;
            let fresh = store.get_delivery(queued.owner.clone(), queued.delivery_id).await?;
            match fresh {
                Some(fresh) if tries < 5 => {
                    delivery = fresh;
                    outcome = record(&mut delivery, attempt.clone(), retry_after, queued.trigger, now, jitter, pace);
                }
                _ => {
                    tracing::error!(delivery_id = %queued.delivery_id, "attempt not recorded: the delivery kept changing");
                    break;
                }
            }
        }
        let result = match delivery.status {
            _ if (200..300).contains(&status_code) => "delivered",
            DeliveryStatus::Failed => "failed",
            _ => "retrying",
        };
        telemetry::metrics::emit([telemetry::metrics::webhook_delivery(result, delivery.attempt_count)]);
        // The attempt is recorded: from here on a failure must not make SQS send it again (a
        // replay twice, a retry at the queue's timeout instead of its schedule), so it is logged.
        if let Err(err) =
            self.record_endpoint_health(endpoint, (200..300).contains(&status_code), status_code, timed_out, now).await
        {
            tracing::error!(error = %err, delivery_id = %queued.delivery_id, "endpoint health not recorded");
        }
        Ok(outcome)
    }

    /// A delivery whose owner has every in-flight place taken: sent again as a new message after
    /// `retry_after_seconds` (at most `MAX_DEFER`, jittered), so waiting for a place never counts
    /// toward the queue's `maxReceiveCount`. When that send fails, this message is retried then.
    async fn defer(&self, queued: &DeliveryMessage, retry_after_seconds: i64) -> Outcome {
        let seconds = u64::try_from(retry_after_seconds).unwrap_or(1).clamp(1, MAX_DEFER.as_secs());
        // Jitter of up to a fifth either way, so deferred deliveries do not come back together.
        let jittered = seconds as f64 * (1.0 + 0.2 * (self.jitter)().clamp(-1.0, 1.0));
        let wait = Duration::try_from_secs_f64(jittered).unwrap_or(Duration::from_secs(seconds));
        tracing::info!(delivery_id = %queued.delivery_id, wait_ms = wait.as_millis(), "owner at its in-flight bound; delivery deferred");
        match self.publisher.queue.send_after(std::slice::from_ref(queued), wait).await {
            Ok(()) => Outcome::Done,
            Err(err) => {
                tracing::warn!(error = %err, delivery_id = %queued.delivery_id, "deferred delivery not sent again; retried by SQS");
                Outcome::RetryAfter(wait)
            }
        }
    }

    /// An event recorded when its endpoints could not be read (`Delivery::fan_out`): its
    /// deliveries are made now, then its stand-in is settled. A failure leaves the stand-in
    /// pending: SQS retries the message, and the sweeper queues it again when that is lost.
    async fn fan_out(
        &self,
        mut stand_in: Delivery,
        event: Option<Event>,
        now: DateTime<Utc>,
    ) -> Result<Outcome, StoreError> {
        let Some(event) = event else { return self.give_up(stand_in, now).await };
        if stand_in.status != DeliveryStatus::Pending {
            return Ok(Outcome::Done);
        }
        if let Owner::Organization(organization_id) = event.owner {
            match &self.audience {
                Some(audience) => {
                    audience::fan_out(&self.publisher, audience.as_ref(), &event, organization_id).await?;
                }
                None => {
                    tracing::warn!(event_id = %event.id, "no audience configured: a meeting event is not fanned out")
                }
            }
        } else {
            let deliveries = self.publisher.fan_out(&event).await?;
            tracing::info!(event_id = %event.id, deliveries = deliveries.len(), "a recorded event fanned out");
        }
        stand_in.status = DeliveryStatus::Succeeded;
        stand_in.next_attempt_at = None;
        stand_in.updated_at = now;
        stand_in.revision += 1;
        // Refused only when another message of it settled it first.
        self.publisher.store.update_delivery(&stand_in).await?;
        Ok(Outcome::Done)
    }

    /// Whether the endpoint's owner may still receive the event: always for an account; for an
    /// application, what the audience says now (linked, active, granted the scope).
    async fn may_deliver(&self, endpoint: &Endpoint, event: &Event) -> Result<bool, StoreError> {
        let Owner::Application(client_id) = &endpoint.owner else { return Ok(true) };
        let Some(audience) = &self.audience else { return Ok(false) };
        let allowed = audience::may_deliver(audience.as_ref(), client_id, event).await?;
        if !allowed {
            tracing::info!(endpoint_id = %endpoint.id, event_id = %event.id, "the application may no longer receive this event");
        }
        Ok(allowed)
    }

    async fn give_up(&self, mut delivery: Delivery, now: DateTime<Utc>) -> Result<Outcome, StoreError> {
        if delivery.status == DeliveryStatus::Pending {
            delivery.status = DeliveryStatus::Failed;
            delivery.next_attempt_at = None;
            delivery.updated_at = now;
            delivery.revision += 1;
            // Refused only when another attempt just wrote it; that one decided.
            self.publisher.store.update_delivery(&delivery).await?;
        }
        Ok(Outcome::Done)
    }

    /// One HTTP attempt within `limit`, the receiver's `Retry-After`, if any, and whether it
    /// timed out (no answer, or not all of it, within `limit`).
    async fn attempt(
        &self,
        endpoint: &Endpoint,
        message_id: &str,
        body: &str,
        secrets: &EndpointSecrets,
        trigger: Trigger,
        limit: Duration,
    ) -> (Attempt, Option<Duration>, bool) {
        let now = self.now();
        let timestamp = now.timestamp();
        let started = Instant::now();
        let failed = |error: String| Attempt {
            timestamp: now,
            status_code: 0,
            response_body: String::new(),
            duration_ms: 0,
            error: Some(error),
            trigger,
        };
        if let Err(issue) = self.policy.check_url(&endpoint.spec.url) {
            return (failed(format!("the endpoint URL {issue}")), None, false);
        }
        let signature = signature_header(secrets.signing(now), message_id, timestamp, body.as_bytes());
        let sent = self
            .client
            .post(&endpoint.spec.url)
            .header("content-type", "application/json")
            .header("webhook-id", message_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body.to_owned())
            .timeout(limit)
            .send()
            .await;
        let mut response = match sent {
            Ok(response) => response,
            Err(err) => {
                let mut attempt = failed(outbound::describe(&err));
                attempt.duration_ms = elapsed_ms(started);
                return (attempt, None, err.is_timeout());
            }
        };
        let status_code = response.status().as_u16();
        let retry_after =
            response.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(parse_retry_after);
        let mut kept = Vec::new();
        let mut error = None;
        let mut timed_out = false;
        while kept.len() < MAX_RESPONSE_BODY {
            match response.chunk().await {
                Ok(Some(chunk)) => kept.extend_from_slice(&chunk),
                Ok(None) => break,
                Err(err) => {
                    error = Some(outbound::describe(&err));
                    timed_out = err.is_timeout();
                    break;
                }
            }
        }
        kept.truncate(MAX_RESPONSE_BODY);
        // Lossy decoding may grow the bytes (U+FFFD); the limit is on what is stored.
        let response_body = truncate(String::from_utf8_lossy(&kept).into_owned(), MAX_RESPONSE_BODY);
        let error = error.or_else(|| (!(200..300).contains(&status_code)).then(|| format!("HTTP {status_code}")));
        let attempt =
            Attempt { timestamp: now, status_code, response_body, duration_ms: elapsed_ms(started), error, trigger };
        (attempt, retry_after, timed_out)
    }

    /// One success clears the failure clock; 410 disables at once; 5 days of failures disable
    /// (one day when every attempt times out: `Pace`); a timeout adds to the endpoint's timeouts
    /// in a row, any answer clears them. Written only over the endpoint as read (an owner's edit
    /// is never undone); when it changed meanwhile, the change is worked out again on a fresh
    /// read.
    async fn record_endpoint_health(
        &self,
        mut endpoint: Endpoint,
        succeeded: bool,
        status_code: u16,
        timed_out: bool,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let store = &self.publisher.store;
        for _ in 0..3 {
            let previous_update = endpoint.updated_at;
            let pace = Pace::after(endpoint.timeouts_in_a_row, timed_out);
            let Some(disable_reason) = health_change(&mut endpoint, succeeded, status_code, pace, now) else {
                return Ok(());
            };
            endpoint.updated_at = now;
            if store.replace_endpoint_if_unchanged(&endpoint, previous_update).await? {
                if let Some(reason) = disable_reason {
                    tracing::warn!(endpoint_id = %endpoint.id, %reason, "endpoint disabled");
                    let data = json!({ "endpoint_id": endpoint.id, "url": endpoint.spec.url, "reason": reason });
                    let owner = endpoint.owner.clone();
                    if let Err(err) = self.publisher.publish(owner, "endpoint.disabled", data, now).await {
                        tracing::error!(error = %err, endpoint_id = %endpoint.id, "endpoint.disabled not published");
                    }
                }
                return Ok(());
            }
            match store.get_endpoint(endpoint.owner.clone(), endpoint.id).await? {
                Some(fresh) => endpoint = fresh,
                None => return Ok(()),
            }
        }
        tracing::error!(endpoint_id = %endpoint.id, "endpoint health not recorded: it kept changing");
        Ok(())
    }
}

/// Applies an attempt's result to an endpoint's health; `pace` is the endpoint's after this
/// attempt. `None`: nothing changes; `Some(reason)`: the endpoint changed, and `reason` says why
/// it was disabled, if it was.
fn health_change(
    endpoint: &mut Endpoint,
    succeeded: bool,
    status_code: u16,
    pace: Pace,
    now: DateTime<Utc>,
) -> Option<Option<String>> {
    let disable_reason = if !endpoint.spec.enabled {
        None
    } else if status_code == 410 {
        Some("the endpoint answered 410 Gone".to_owned())
    } else if succeeded {
        None
    } else {
        endpoint.failing_since.and_then(|since| pace.disable_reason(since, now)).map(str::to_owned)
    };
    let timeouts_changed = endpoint.timeouts_in_a_row != pace.timeouts_in_a_row;
    endpoint.timeouts_in_a_row = pace.timeouts_in_a_row;
    match (&disable_reason, succeeded) {
        (Some(reason), _) => {
            endpoint.spec.enabled = false;
            endpoint.disabled_reason = Some(reason.clone());
        }
        (None, true) if endpoint.failing_since.is_some() => endpoint.failing_since = None,
        (None, false) if endpoint.failing_since.is_none() => endpoint.failing_since = Some(now),
        _ if timeouts_changed => {}
        _ => return None,
    }
    Some(disable_reason)
}

/// Adds an attempt to a delivery and decides what follows: only 2xx succeeds; a failed replay
/// changes nothing else (pending retries stay scheduled); 410 fails for good; other failures wait
/// for the next scheduled attempt, or fail for good when none is left.
fn record(
    delivery: &mut Delivery,
    attempt: Attempt,
    retry_after: Option<Duration>,
    trigger: Trigger,
    now: DateTime<Utc>,
    jitter: f64,
    pace: Pace,
) -> Outcome {
    let status_code = attempt.status_code;
    delivery.add_attempt(attempt);
    delivery.updated_at = now;
    delivery.revision += 1;
    if (200..300).contains(&status_code) {
        delivery.status = DeliveryStatus::Succeeded;
        delivery.next_attempt_at = None;
        return Outcome::Done;
    }
    // A failed replay, or a retry of a delivery another attempt settled, changes nothing else.
    if trigger == Trigger::Manual || delivery.status != DeliveryStatus::Pending {
        return Outcome::Done;
    }
    let wait = if status_code == 410 {
        None
    } else {
        next_retry(delivery.scheduled_attempts(), retry_after, jitter).map(|wait| pace.retry_wait(wait))
    };
    match wait {
        Some(wait) => {
            delivery.next_attempt_at = chrono::Duration::from_std(wait).ok().map(|span| now + span);
            Outcome::RetryAfter(wait)
        }
        None => {
            delivery.status = DeliveryStatus::Failed;
            delivery.next_attempt_at = None;
            Outcome::Done
        }
    }
}

/// The HTTP client of deliveries: no redirects, addresses checked after resolution (each
/// attempt sets its own limit).
fn delivery_client(policy: &UrlPolicy) -> outbound::Client {
    outbound::Client::new(policy.address_policy()).with_user_agent(USER_AGENT).with_timeout(ATTEMPT_TIMEOUT)
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

fn elapsed_ms(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use platform_data::ids::{AccountId, WebhookEndpointId};
    use uuid::Uuid;

    const ANSWERING: Pace = Pace { timeouts_in_a_row: 0 };

    fn pending() -> Delivery {
        Delivery::pending(
            Uuid::new_v4(),
            crate::owner::Owner::Account(AccountId::new_v4()),
            WebhookEndpointId::new_v4(),
            Uuid::new_v4(),
            "webhook.test",
            Utc::now(),
        )
    }

    fn attempt(status_code: u16, trigger: Trigger) -> Attempt {
        Attempt {
            timestamp: Utc::now(),
            status_code,
            response_body: String::new(),
            duration_ms: 1,
            error: None,
            trigger,
        }
    }

    #[test]
    fn attempts_decide_the_delivery_and_bump_its_revision() {
        let now = Utc::now();
        let mut delivery = pending();
        let outcome =
            record(&mut delivery, attempt(500, Trigger::Scheduled), None, Trigger::Scheduled, now, 0.0, ANSWERING);
        assert_eq!(outcome, Outcome::RetryAfter(Duration::from_secs(5)));
        assert_eq!((delivery.status, delivery.revision), (DeliveryStatus::Pending, 1));
        assert_eq!(delivery.next_attempt_at, Some(now + chrono::Duration::seconds(5)));

        // A failed replay leaves the schedule alone; a successful one settles the delivery.
        assert_eq!(
            record(&mut delivery, attempt(0, Trigger::Manual), None, Trigger::Manual, now, 0.0, ANSWERING),
            Outcome::Done
        );
        assert_eq!((delivery.status, delivery.scheduled_attempts()), (DeliveryStatus::Pending, 1));
        assert_eq!(
            record(&mut delivery, attempt(204, Trigger::Manual), None, Trigger::Manual, now, 0.0, ANSWERING),
            Outcome::Done
        );
        assert_eq!((delivery.status, delivery.next_attempt_at), (DeliveryStatus::Succeeded, None));
        // A retry racing that success is recorded but schedules nothing.
        assert_eq!(
            record(&mut delivery, attempt(500, Trigger::Scheduled), None, Trigger::Scheduled, now, 0.0, ANSWERING),
            Outcome::Done
        );
        assert_eq!((delivery.status, delivery.attempts.len(), delivery.revision), (DeliveryStatus::Succeeded, 4, 4));

        let mut gone = pending();
        assert_eq!(
            record(
                &mut gone,
                attempt(410, Trigger::Scheduled),
                Some(Duration::from_secs(60)),
                Trigger::Scheduled,
                now,
                0.0,
                ANSWERING
            ),
            Outcome::Done
        );
        assert_eq!(gone.status, DeliveryStatus::Failed);
    }

    /// Records a scheduled attempt answered `status_code`, of an endpoint at `pace`.
    fn scheduled(delivery: &mut Delivery, status_code: u16, pace: Pace) -> Outcome {
        record(delivery, attempt(status_code, Trigger::Scheduled), None, Trigger::Scheduled, Utc::now(), 0.0, pace)
    }

    #[test]
    fn a_slow_endpoints_retries_wait_at_least_the_slow_minimum() {
        let slow = Pace { timeouts_in_a_row: crate::policy::SLOW_AFTER_TIMEOUTS };
        assert_eq!(scheduled(&mut pending(), 0, slow), Outcome::RetryAfter(crate::policy::SLOW_RETRY_MIN));
        assert_eq!(scheduled(&mut pending(), 0, ANSWERING), Outcome::RetryAfter(Duration::from_secs(5)));
    }

    #[test]
    fn the_eighth_scheduled_failure_is_final() {
        let mut delivery = pending();
        for _ in 0..7 {
            assert!(matches!(scheduled(&mut delivery, 503, ANSWERING), Outcome::RetryAfter(_)));
        }
        let last = scheduled(&mut delivery, 503, ANSWERING);
        assert_eq!((last, delivery.status), (Outcome::Done, DeliveryStatus::Failed));
    }

    #[test]
    fn the_previous_secret_signs_only_until_it_expires() {
        let now = Utc::now();
        let secrets = EndpointSecrets {
            current: "whsec_new".into(),
            previous: Some("whsec_old".into()),
            previous_expires_at: Some(now + chrono::Duration::hours(24)),
        };
        assert_eq!(secrets.signing(now), ["whsec_new", "whsec_old"]);
        assert_eq!(secrets.signing(now + chrono::Duration::hours(24)), ["whsec_new"]);
    }
}
