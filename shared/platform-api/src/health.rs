//! `GET /health-check`, `/health-check/auth-test`, `/health-check/database`.
//!
//! All three pass the API-key gate like every backend route. The database check calls
//! DescribeTimeToLive on every table in the function's environment, concurrently, and reports
//! each one's status and latency; any failure makes it a 503 naming what failed. It is the
//! operation naming a table with the smallest answer: DescribeTable's `TableDescription` alone
//! linked ~80 KiB of deserializer into the function (docs/performance.md).

use crate::envelope::{ApiError, ErrorCode, success};
use crate::gate::{Access, Gate};
use aws_env::settings::{Lookup, SettingError};
use futures_util::future::join_all;
use http::{Method, StatusCode};
use http_api::routing::without_trailing_slash;
use http_api::{Body, HttpFunction, Request, Response, ResponseFuture};
use platform_data::api_keys::Caller;
use serde::Serialize;
use serde_json::json;
use std::time::Instant;

/// Every table variable a function environment may hold; the health check probes those present.
/// A drift test keeps this list and `template.yaml`'s tables in step.
pub const TABLE_VARIABLES: &[&str] = &[
    "MEETINGS_TABLE",
    "DIRECTORY_TABLE",
    "EXTERNAL_APPS_TABLE",
    "ACCESS_TOKENS_TABLE",
    "API_KEYS_TABLE",
    "AGENTS_TABLE",
    "LANGUAGE_MODELS_TABLE",
    "TOOLS_TABLE",
    "MCP_CONFIGS_TABLE",
    "WEBHOOK_ENDPOINTS_TABLE",
    "WEBHOOK_EVENTS_TABLE",
    "WEBHOOK_DELIVERIES_TABLE",
    "RUNS_TABLE",
    "RUN_EVENTS_TABLE",
    "RUN_STEPS_TABLE",
    "RUN_COUNTS_TABLE",
    "USAGE_TABLE",
    "SCHEDULES_TABLE",
    "RATE_LIMITS_TABLE",
    "QUOTAS_TABLE",
];

/// The health function.
pub struct HealthService {
    gate: Gate,
    db: aws_sdk_dynamodb::Client,
    /// (variable, table name) of every table to probe.
    tables: Vec<(&'static str, String)>,
}

/// One table's probe.
#[derive(Debug, Serialize)]
pub(crate) struct TableCheck {
    pub table: &'static str,
    pub status: &'static str,
    pub latency_ms: f64,
}

/// The tables of `TABLE_VARIABLES` that the function's settings name: (variable, table name).
pub(crate) fn tables_in(lookup: Lookup) -> Vec<(&'static str, String)> {
    TABLE_VARIABLES.iter().filter_map(|variable| lookup(variable).map(|name| (*variable, name))).collect()
}

/// DescribeTimeToLive on every table, concurrently: each one's status (`ok`, `unreachable`) and
/// latency in milliseconds.
pub(crate) async fn probe_tables(db: &aws_sdk_dynamodb::Client, tables: &[(&'static str, String)]) -> Vec<TableCheck> {
    join_all(tables.iter().map(|(variable, name)| async move {
        let started = Instant::now();
        let result = db.describe_time_to_live().table_name(name).send().await;
        let latency_ms = milliseconds(started);
        match result {
            Ok(_) => TableCheck { table: variable, status: "ok", latency_ms },
            Err(err) => {
                // The SDK's text names accounts, roles and ARNs: logged, never returned.
                let message = aws_sdk_dynamodb::error::DisplayErrorContext(err).to_string();
                tracing::warn!(table = %variable, error = %message, "table unreachable");
                TableCheck { table: variable, status: "unreachable", latency_ms }
            }
        }
    }))
    .await
}

/// Milliseconds since `started`, to two decimals.
pub(crate) fn milliseconds(started: Instant) -> f64 {
    (started.elapsed().as_secs_f64() * 100_000.0).round() / 100.0
}

impl HealthService {
    /// A service configured from settings (see `template.yaml`).
    pub fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Self, SettingError> {
        let tables = tables_in(lookup);
        Ok(Self { gate: Gate::from_settings(aws, lookup)?, db: aws.dynamodb(), tables })
    }

    /// Replaces the gate (tests: a pepper source that re-reads its secret sooner).
    pub fn with_gate(mut self, gate: Gate) -> Self {
        self.gate = gate;
        self
    }

    /// Reads the time from `clock` (tests).
    pub fn with_clock(mut self, clock: aws_env::clock::Clock) -> Self {
        self.gate = self.gate.with_clock(clock);
        self
    }

    async fn route(&self, caller: Caller, request: Request) -> Result<Response<Body>, ApiError> {
        if request.method() != Method::GET {
            return Err(ApiError::method_not_allowed(request.method(), "GET"));
        }
        match without_trailing_slash(request.uri().path()) {
            "/health-check" => Ok(success(
                StatusCode::OK,
                json!({ "status": "healthy", "version": env!("CARGO_PKG_VERSION") }),
                "Service is healthy",
            )),
            "/health-check/auth-test" => Ok(success(
                StatusCode::OK,
                json!({
                    "authenticated": true,
                    "account_id": caller.account_id,
                    "key_id": caller.key_id,
                    "key_name": caller.key_name,
                }),
                "API key is valid",
            )),
            "/health-check/database" => self.database().await,
            _ => Err(ApiError::new(ErrorCode::ResourceNotFound, "No such health check.")),
        }
    }

    async fn database(&self) -> Result<Response<Body>, ApiError> {
        let checks = probe_tables(&self.db, &self.tables).await;
        if checks.iter().all(|check| check.status == "ok") {
            Ok(success(StatusCode::OK, json!({ "status": "healthy", "tables": checks }), "Database is reachable"))
        } else {
            let failed: Vec<&str> = checks.iter().filter(|c| c.status != "ok").map(|c| c.table).collect();
            Err(ApiError::new(ErrorCode::ServiceUnavailable, format!("Unreachable tables: {}", failed.join(", ")))
                .with_detail("tables", serde_json::to_value(&checks).unwrap_or_default()))
        }
    }
}

impl HttpFunction for HealthService {
    fn handle(&self, request: Request) -> ResponseFuture<'_> {
        let access = Access::by_method(&request);
        Box::pin(self.gate.serve(request, access, |caller, request| self.route(caller, request)))
    }
}
