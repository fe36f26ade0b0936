//! Endpoints: `WebhookEndpointsTable`, `sk = ENDPOINT#{id}`.

use super::{WebhookStore, endpoint_key};
use crate::endpoints::EndpointSpec;
use crate::owner::{APPLICATIONS_PARTITION, Owner};
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem};
use chrono::{DateTime, Utc};
use platform_data::StoreError;
use platform_data::dynamo::{Item, Read, applied, get_item, query_all};
use platform_data::ids::WebhookEndpointId;
use serde::{Deserialize, Serialize};
use storage::quota::{Counted, Quota};

/// A stored endpoint (its secrets are in Secrets Manager).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Endpoint {
    pub id: WebhookEndpointId,
    pub owner: Owner,
    pub spec: EndpointSpec,
    /// Why the service disabled it (`410 Gone`, failing for 5 days); `None` when enabled or
    /// disabled by its owner.
    pub disabled_reason: Option<String>,
    /// Start of the current run of failures; cleared by one success.
    pub failing_since: Option<DateTime<Utc>>,
    /// Attempts in a row that got no answer in time; cleared by any answer (`policy::Pace`).
    pub timeouts_in_a_row: u32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Serialize, Deserialize)]
struct EndpointItem {
    pk: String,
    sk: String,
    spec: String,
    #[serde(flatten)]
    rest: EndpointRest,
}

#[derive(Serialize, Deserialize)]
struct EndpointRest {
    id: WebhookEndpointId,
    #[serde(flatten)]
    owner: Owner,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    disabled_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failing_since: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "is_zero")]
    timeouts_in_a_row: u32,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

fn is_zero(count: &u32) -> bool {
    *count == 0
}

impl Endpoint {
    fn to_item(&self) -> Result<Item, StoreError> {
        let spec = serde_json::to_string(&self.spec).map_err(|err| StoreError::json("webhook JSON attribute", err))?;
        let (pk, prefix) = self.owner.endpoint_keys();
        Ok(serde_dynamo::to_item(EndpointItem {
            pk,
            sk: format!("{prefix}{}", self.id),
            spec,
            rest: EndpointRest {
                id: self.id,
                owner: self.owner.clone(),
                disabled_reason: self.disabled_reason.clone(),
                failing_since: self.failing_since,
                timeouts_in_a_row: self.timeouts_in_a_row,
                created_at: self.created_at,
                updated_at: self.updated_at,
            },
        })?)
    }

    pub(super) fn from_item(item: Item) -> Result<Self, StoreError> {
        let item: EndpointItem = serde_dynamo::from_item(item)?;
        let spec = serde_json::from_str(&item.spec).map_err(|err| StoreError::json("webhook JSON attribute", err))?;
        let rest = item.rest;
        Ok(Self {
            id: rest.id,
            owner: rest.owner,
            spec,
            disabled_reason: rest.disabled_reason,
            failing_since: rest.failing_since,
            timeouts_in_a_row: rest.timeouts_in_a_row,
            created_at: rest.created_at,
            updated_at: rest.updated_at,
        })
    }
}

impl WebhookStore {
    /// Stores a new endpoint, counted when endpoints have a quota: `Err(quota)` when the account
    /// is at it (one TransactWriteItems; without a quota, one PutItem).
    pub async fn create_endpoint(&self, endpoint: &Endpoint) -> Result<Result<(), Quota>, StoreError> {
        let Some((counters, quota)) = &self.quota else {
            self.db
                .put_item()
                .table_name(&self.endpoints)
                .set_item(Some(endpoint.to_item()?))
                .send()
                .await
                .map_err(|err| StoreError::dynamo("PutItem", err))?;
            return Ok(Ok(()));
        };
        let counter = counters.counter(*quota, &endpoint.owner.scope());
        let put = Put::builder()
            .table_name(&self.endpoints)
            .set_item(Some(endpoint.to_item()?))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(|err| StoreError::request("TransactWriteItems", err))?;
        let items = vec![TransactWriteItem::builder().put(put).build(), counter.increment()?];
        let tally = || async { Ok(self.list_endpoints(&endpoint.owner).await?.len()) };
        match counters.transact(&counter, items, 1, None, tally).await? {
            Counted::Written => Ok(Ok(())),
            Counted::QuotaReached(quota) => Ok(Err(quota)),
            Counted::Refused(_) => {
                Err(StoreError::request("TransactWriteItems", "a new endpoint id was already taken"))
            }
        }
    }

    /// Replaces an endpoint unless it changed since `expected_updated_at` (the worker's health
    /// bookkeeping must not undo an owner's edit); `false` when it changed or is gone.
    pub async fn replace_endpoint_if_unchanged(
        &self,
        endpoint: &Endpoint,
        expected_updated_at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let expected = serde_dynamo::to_attribute_value(expected_updated_at)?;
        let result = self
            .db
            .put_item()
            .table_name(&self.endpoints)
            .set_item(Some(endpoint.to_item()?))
            .condition_expression("updated_at = :expected")
            .expression_attribute_values(":expected", expected)
            .send()
            .await;
        applied("PutItem", result)
    }

    /// An endpoint of the owner.
    pub async fn get_endpoint(
        &self,
        owner: impl Into<Owner>,
        id: WebhookEndpointId,
    ) -> Result<Option<Endpoint>, StoreError> {
        let item = get_item(&self.db, &self.endpoints, endpoint_key(&owner.into(), id), Read::CONSISTENT).await?;
        item.map(Endpoint::from_item).transpose()
    }

    /// Every endpoint of the owner (one Query per MB).
    pub async fn list_endpoints(&self, owner: &Owner) -> Result<Vec<Endpoint>, StoreError> {
        let (pk, prefix) = owner.endpoint_keys();
        self.endpoints_under(pk, prefix).await
    }

    /// Every application's endpoints (one Query per MB), for the fan-out of an organization's
    /// event.
    pub async fn application_endpoints(&self) -> Result<Vec<Endpoint>, StoreError> {
        self.endpoints_under(APPLICATIONS_PARTITION.to_owned(), "APP#".to_owned()).await
    }

    async fn endpoints_under(&self, pk: String, prefix: String) -> Result<Vec<Endpoint>, StoreError> {
        let query = self
            .db
            .query()
            .table_name(&self.endpoints)
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .expression_attribute_values(":pk", AttributeValue::S(pk))
            .expression_attribute_values(":prefix", AttributeValue::S(prefix));
        query_all(query).await?.into_iter().map(Endpoint::from_item).collect()
    }

    /// Deletes an endpoint, counted out when endpoints have a quota (one TransactWriteItems;
    /// without a quota, one DeleteItem); `false` when there was none.
    pub async fn delete_endpoint(&self, owner: impl Into<Owner>, id: WebhookEndpointId) -> Result<bool, StoreError> {
        let owner = owner.into();
        if let Some((counters, quota)) = &self.quota {
            let counter = counters.counter(*quota, &owner.scope());
            let delete = Delete::builder()
                .table_name(&self.endpoints)
                .set_key(Some(endpoint_key(&owner, id)))
                .condition_expression("attribute_exists(pk)")
                .build()
                .map_err(|err| StoreError::request("TransactWriteItems", err))?;
            let items = vec![TransactWriteItem::builder().delete(delete).build(), counter.decrement()?];
            let tally = || async { Ok(self.list_endpoints(&owner).await?.len()) };
            return Ok(matches!(counters.transact(&counter, items, 1, None, tally).await?, Counted::Written));
        }
        let output = self
            .db
            .delete_item()
            .table_name(&self.endpoints)
            .set_key(Some(endpoint_key(&owner, id)))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await
            .map_err(|err| StoreError::dynamo("DeleteItem", err))?;
        Ok(output.attributes.is_some_and(|old| !old.is_empty()))
    }
}
