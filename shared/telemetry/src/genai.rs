//! The attribute names and values the platform's spans use, from OpenTelemetry's GenAI semantic
//! conventions at one pinned version (`SEMCONV_VERSION`, docs/tracing.md), plus the platform's
//! own under `agent_platform.*`. The conventions are still in development and rename things;
//! every name lives here so a move to a later version is one file.

/// `open-telemetry/semantic-conventions-genai` v0.1.0 (the first release in its own repository;
/// it builds on semantic-conventions v1.45.0).
pub const SEMCONV_VERSION: &str = "genai v0.1.0";
/// The scope's schema URL (the core conventions the GenAI ones build on).
pub const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.45.0";
/// The instrumentation scope's name.
pub const SCOPE_NAME: &str = "agent-platform";

// Operations (`gen_ai.operation.name`), which also begin the span names.
pub const INVOKE_AGENT: &str = "invoke_agent";
pub const CHAT: &str = "chat";
pub const EXECUTE_TOOL: &str = "execute_tool";

// GenAI attributes.
pub const OPERATION_NAME: &str = "gen_ai.operation.name";
pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
pub const AGENT_ID: &str = "gen_ai.agent.id";
pub const AGENT_NAME: &str = "gen_ai.agent.name";
pub const AGENT_DESCRIPTION: &str = "gen_ai.agent.description";
pub const AGENT_VERSION: &str = "gen_ai.agent.version";
pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
pub const REQUEST_MODEL: &str = "gen_ai.request.model";
pub const REQUEST_STREAM: &str = "gen_ai.request.stream";
pub const RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
pub const RESPONSE_TIME_TO_FIRST_CHUNK: &str = "gen_ai.response.time_to_first_chunk";
pub const USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
pub const USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
pub const USAGE_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
pub const USAGE_CACHE_WRITE_INPUT_TOKENS: &str = "gen_ai.usage.cache_write.input_tokens";
pub const TOOL_NAME: &str = "gen_ai.tool.name";
pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
pub const TOOL_TYPE: &str = "gen_ai.tool.type";
// Opt-in content (recorded only with content capture on).
pub const SYSTEM_INSTRUCTIONS: &str = "gen_ai.system_instructions";
pub const INPUT_MESSAGES: &str = "gen_ai.input.messages";
pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
pub const TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
pub const TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";

// `gen_ai.tool.type` values.
/// A tool the agent's side runs (our HTTP, Python and MCP tools, sub-agents).
pub const TOOL_TYPE_EXTENSION: &str = "extension";

// `gen_ai.provider.name` well-known values.
pub const PROVIDER_OPENAI: &str = "openai";
pub const PROVIDER_ANTHROPIC: &str = "anthropic";
pub const PROVIDER_AWS_BEDROCK: &str = "aws.bedrock";
pub const PROVIDER_AZURE_OPENAI: &str = "azure.ai.openai";

// MCP (the conventions' `mcp.md`).
pub const MCP_METHOD_NAME: &str = "mcp.method.name";
pub const MCP_PROTOCOL_VERSION: &str = "mcp.protocol.version";
pub const JSONRPC_REQUEST_ID: &str = "jsonrpc.request.id";

// Core attributes.
pub const ERROR_TYPE: &str = "error.type";

// The platform's own.
pub const RUN_ID: &str = "agent_platform.run.id";
pub const RUN_TYPE: &str = "agent_platform.run.type";
pub const ACCOUNT_ID: &str = "agent_platform.account.id";
pub const AGENT_TYPE: &str = "agent_platform.agent.type";
pub const FAILURE_REASON: &str = "agent_platform.run.failure_reason";
pub const COST_MICROS: &str = "agent_platform.run.cost_micros";
pub const RUN_STEPS: &str = "agent_platform.run.steps";
pub const TOOL_KIND: &str = "agent_platform.tool.kind";

// The platform's own span names.
/// The time a queued or scheduled run waited for a worker.
pub const QUEUE_WAIT: &str = "queue_wait";
/// One invocation's part of a run that several invocations execute.
pub const CONTINUE_RUN: &str = "continue_run";
/// A Python tool's call of the tool sandbox function.
pub const INVOKE_SANDBOX: &str = "invoke_sandbox";
