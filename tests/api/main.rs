//! Integration tests: every function through its real handler against the local AWS endpoint.
//! One binary (faster to link); each test builds its own isolated stack.

mod admin;
mod agent_runs;
mod agents;
mod auth;
mod cancel;
mod dev_server;
mod dynamodb_calls;
mod dynamodb_limits;
mod engine;
mod flowtool;
mod fuzz;
mod gateway_events;
mod hardening;
mod interop;
mod interop_langflow;
mod lambda_mode;
mod language_models;
mod log_hygiene;
mod mcp_client;
mod mcps;
mod meeting_list;
mod meeting_reads;
mod pepper_rotation;
mod platform_gate;
mod providers;
mod queued_runs;
mod records;
mod runner_service;
mod runs;
mod schedules;
mod sdk_clients;
mod stack_drift;
mod tool_sandbox;
mod tools;
mod webhooks;
