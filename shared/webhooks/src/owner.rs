//! Who webhook records belong to: the partition every endpoint, event and delivery is kept in,
//! so one owner's ids are never found under another's.

use platform_data::ids::AccountId;
use serde::{Deserialize, Serialize};

/// The owner of endpoints, events and deliveries. Stored and queued as one field named after
/// its kind (`account_id`, `client_id` or `organization_id`), so records written before there
/// were other owners than accounts read as they are.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Owner {
    /// An account of the agent platform (the backend's `/webhooks` routes).
    #[serde(rename = "account_id")]
    Account(AccountId),
    /// An external application of the meeting data API, by client id
    /// (`/api/v1/external/webhooks/`).
    #[serde(rename = "client_id")]
    Application(String),
    /// An organization of the meeting data. It has no endpoints: it owns the outbox events that
    /// writes of its meetings record, which the delivery worker fans out to the applications
    /// linked to it (`crate::audience`).
    #[serde(rename = "organization_id")]
    Organization(i64),
}

impl From<AccountId> for Owner {
    fn from(account_id: AccountId) -> Self {
        Self::Account(account_id)
    }
}

/// The partition of every application's endpoints: the fan-out of an organization's event
/// reads them in one Query (their number is bounded by the operator's applications and the
/// per-owner endpoint quota).
pub(crate) const APPLICATIONS_PARTITION: &str = "APPLICATIONS";

impl Owner {
    /// The partition key of the owner's events and deliveries.
    pub fn partition(&self) -> String {
        match self {
            Self::Account(id) => format!("ACCOUNT#{id}"),
            Self::Application(client_id) => format!("APP#{client_id}"),
            Self::Organization(id) => format!("ORG#{id}"),
        }
    }

    /// The owner a partition key names (`partition`'s inverse).
    pub fn from_partition(pk: &str) -> Option<Self> {
        if let Some(id) = pk.strip_prefix("ACCOUNT#") {
            return uuid::Uuid::parse_str(id).ok().map(|id| Self::Account(id.into()));
        }
        if let Some(client_id) = pk.strip_prefix("APP#") {
            return (!client_id.is_empty()).then(|| Self::Application(client_id.to_owned()));
        }
        pk.strip_prefix("ORG#").and_then(|id| id.parse().ok()).map(Self::Organization)
    }

    /// The partition and sort-key prefix of the owner's endpoints: an account's are in its own
    /// partition, every application's in `APPLICATIONS_PARTITION`.
    pub(crate) fn endpoint_keys(&self) -> (String, String) {
        match self {
            Self::Application(client_id) => (APPLICATIONS_PARTITION.to_owned(), format!("APP#{client_id}#ENDPOINT#")),
            other => (other.partition(), "ENDPOINT#".to_owned()),
        }
    }

    /// The owner's name in shared counters (endpoint quota, in-flight deliveries): distinct per
    /// kind, so ids of two kinds never share one. An account's is its id, as before there were
    /// other kinds.
    pub fn scope(&self) -> String {
        match self {
            Self::Account(id) => id.to_string(),
            Self::Application(client_id) => format!("app:{client_id}"),
            Self::Organization(id) => format!("org:{id}"),
        }
    }

    /// The owner's part of its records' secret names (`platform_data::secrets`): an account's
    /// id as before there were other kinds, `app/{client_id}` or `org/{id}` (Secrets Manager
    /// names take letters, digits and `/_+=.@-`, and client ids are base64url).
    pub fn secret_path(&self) -> String {
        match self {
            Self::Account(id) => id.to_string(),
            Self::Application(client_id) => format!("app/{client_id}"),
            Self::Organization(id) => format!("org/{id}"),
        }
    }

    /// The account, when an account owns it.
    pub fn account(&self) -> Option<AccountId> {
        match self {
            Self::Account(id) => Some(*id),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_name_their_owner_back() {
        for owner in [Owner::Account(AccountId::new_v4()), Owner::Application("c-1_x".into()), Owner::Organization(-4)]
        {
            assert_eq!(Owner::from_partition(&owner.partition()), Some(owner));
        }
        for unknown in ["", "ACCOUNT#x", "APP#", "ORG#1.5", "USER#1"] {
            assert_eq!(Owner::from_partition(unknown), None, "{unknown}");
        }
    }

    proptest::proptest! {
        /// A stored partition key of any shape names an owner or nothing, without panicking; what
        /// it names gives the same key back.
        #[test]
        fn any_partition_key_names_an_owner_or_nothing(pk in "(ACCOUNT#|APP#|ORG#)?.{0,40}") {
            if let Some(owner) = Owner::from_partition(&pk) {
                proptest::prop_assert_eq!(Owner::from_partition(&owner.partition()), Some(owner));
            }
        }
    }

    #[test]
    fn an_owner_is_one_field_named_after_its_kind() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Record {
            id: u32,
            #[serde(flatten)]
            owner: Owner,
        }
        let account = AccountId::new_v4();
        let record = Record { id: 1, owner: Owner::Account(account) };
        let item: storage::Item = serde_dynamo::to_item(&record).unwrap();
        assert_eq!(item.len(), 2);
        assert_eq!(item["account_id"].as_s().unwrap(), &account.to_string());
        assert_eq!(serde_dynamo::from_item::<_, Record>(item).unwrap(), record);
        for owner in [Owner::Application("c1".into()), Owner::Organization(7)] {
            let record = Record { id: 2, owner };
            let item: storage::Item = serde_dynamo::to_item(&record).unwrap();
            assert_eq!(serde_dynamo::from_item::<_, Record>(item).unwrap(), record);
            let json = serde_json::to_string(&record).unwrap();
            assert_eq!(serde_json::from_str::<Record>(&json).unwrap(), record);
        }
        assert_eq!(
            serde_json::to_value(Record { id: 3, owner: Owner::Organization(7) }).unwrap(),
            serde_json::json!({"id": 3, "organization_id": 7})
        );
    }
}
