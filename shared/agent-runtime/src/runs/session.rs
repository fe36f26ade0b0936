//! Session memory: an agent's conversation is the earlier successful runs of its session, found
//! by the `by-session` index.

use super::{RunRecord, RunStore};
use aws_sdk_dynamodb::types::AttributeValue;
use platform_data::ids::AgentId;
use storage::{StoreError, query_page};

/// The `by-session` key of an agent's conversation.
pub fn session_key(agent_id: AgentId, session_id: &str) -> String {
    format!("{agent_id}#{session_id}")
}

impl RunStore {
    /// The last `max_messages` messages of a conversation: each earlier successful run of the
    /// session still kept at `now`, as its user message and the agent's answer, oldest first
    /// (one Query).
    pub async fn session_history(
        &self,
        agent_id: AgentId,
        session_id: &str,
        max_messages: usize,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<crate::providers::Message>, StoreError> {
        use crate::providers::Message;
        if max_messages == 0 {
            return Ok(Vec::new());
        }
        let runs_wanted = i32::try_from(max_messages.div_ceil(2)).unwrap_or(i32::MAX);
        let query = self
            .db
            .query()
            .table_name(&self.runs_table)
            .index_name("by-session")
            .key_condition_expression("session_key = :session AND run_id >= :kept")
            .filter_expression("#status = :success")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":session", AttributeValue::S(session_key(agent_id, session_id)))
            .expression_attribute_values(":success", AttributeValue::S("success".into()))
            .expression_attribute_values(":kept", AttributeValue::S(self.retention().first_kept_id(now)))
            .scan_index_forward(false);
        // The filter applies after `Limit`, so ask for a few more runs than the messages need.
        let page = query_page(query, Some(runs_wanted.saturating_mul(2)), None).await?;
        let mut messages = Vec::new();
        for item in page.items.into_iter().take(max_messages.div_ceil(2)) {
            let run: RunRecord = serde_dynamo::from_item(item)?;
            let answer = Message::Assistant { text: run.output.unwrap_or_default(), tool_calls: Vec::new() };
            messages.push(answer);
            messages.push(Message::user(run.input.message));
        }
        messages.reverse();
        let skip = messages.len().saturating_sub(max_messages);
        let mut history = messages.split_off(skip);
        // A conversation starts with the user (Anthropic requires it).
        if matches!(history.first(), Some(Message::Assistant { .. })) {
            history.remove(0);
        }
        Ok(history)
    }
}
