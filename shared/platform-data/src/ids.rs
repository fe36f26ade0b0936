//! Typed ids: one type per kind of thing an id names, so ids that travel together (an account,
//! its agent, the agent's run) cannot be swapped. Each is a UUID on the wire, in DynamoDB and in
//! logs (`#[serde(transparent)]`; `Display` and `Debug` are the UUID's): bodies and stored items
//! are the same as with bare UUIDs.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::hash::Hash;
use std::str::FromStr;
use uuid::Uuid;

/// What every typed id offers: generic code (`records::Record<T>`) names its body's id by it.
pub trait TypedId:
    Copy + Eq + Ord + Hash + fmt::Display + fmt::Debug + Serialize + DeserializeOwned + From<Uuid> + Into<Uuid>
{
}

macro_rules! typed_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Uuid);

        impl $name {
            /// A random (version 4) id.
            pub fn new_v4() -> Self {
                Self(Uuid::new_v4())
            }

            /// The UUID itself.
            pub const fn into_uuid(self) -> Uuid {
                self.0
            }

            /// The UUID's 16 bytes.
            pub const fn as_bytes(&self) -> &[u8; 16] {
                self.0.as_bytes()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(text).map(Self)
            }
        }

        impl From<Uuid> for $name {
            fn from(uuid: Uuid) -> Self {
                Self(uuid)
            }
        }

        impl From<$name> for Uuid {
            fn from(id: $name) -> Self {
                id.0
            }
        }

        impl TypedId for $name {}
    };
}

typed_id!(
    /// An account: every record, run and schedule belongs to one.
    AccountId
);
typed_id!(
    /// An agent (`agents::Agent`).
    AgentId
);
typed_id!(
    /// A run of an agent: a UUIDv7, so ordering by id is ordering by start.
    RunId
);
typed_id!(
    /// A schedule of an agent (`schedules::ScheduleRecord`).
    ScheduleId
);
typed_id!(
    /// A tool (`tools::Tool`).
    ToolId
);
typed_id!(
    /// An MCP configuration (`mcp_configs::McpConfig`).
    McpConfigId
);
typed_id!(
    /// A language model (`language_models::LanguageModel`).
    LanguageModelId
);
typed_id!(
    /// A webhook endpoint of an account (the `webhooks` crate's `Endpoint`).
    WebhookEndpointId
);

impl RunId {
    /// A new run's id: a UUIDv7 of now.
    pub fn now_v7() -> Self {
        Self(Uuid::now_v7())
    }
}

impl ScheduleId {
    /// A new schedule's id: a UUIDv7 of now, so an account's schedules sort by creation.
    pub fn now_v7() -> Self {
        Self(Uuid::now_v7())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_id_is_its_uuid_in_json_text_and_logs() {
        let uuid = Uuid::from_u128(0x67e5_5044_10b1_426f_9247_bb68_0e5f_e0c8);
        let id = AgentId::from(uuid);
        assert_eq!(json!(id), json!(uuid));
        assert_eq!(serde_json::from_value::<AgentId>(json!(uuid)).unwrap(), id);
        assert_eq!((id.to_string(), format!("{id:?}")), (uuid.to_string(), format!("{uuid:?}")));
        assert_eq!(uuid.to_string().parse::<AgentId>().unwrap().into_uuid(), uuid);
        assert!("not-a-uuid".parse::<AgentId>().is_err());
        let item: serde_dynamo::AttributeValue = serde_dynamo::to_attribute_value(id).unwrap();
        assert_eq!(item, serde_dynamo::to_attribute_value::<_, serde_dynamo::AttributeValue>(uuid).unwrap());
        let keyed = std::collections::BTreeMap::from([(ToolId::from(uuid), 1)]);
        assert_eq!(serde_json::to_string(&keyed).unwrap(), format!("{{\"{uuid}\":1}}"));
        assert_eq!(
            serde_json::from_str::<std::collections::BTreeMap<ToolId, u8>>(&format!("{{\"{uuid}\":1}}")).unwrap(),
            keyed
        );
    }
}
