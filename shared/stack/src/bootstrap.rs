//! Creating the template's tables, secrets and queues on a local AWS endpoint (DynamoDB Local,
//! moto, LocalStack).
//!
//! Idempotent: an endpoint may outlive `make dev` (DynamoDB Local kept running, LocalStack), so
//! what exists already is kept when it matches the template (a secret keeps its material), and
//! what differs is an error that names every difference.

use crate::physical_name;
use crate::template::{KeySchema, TableSpec, Template};
use aws_env::SdkConfig;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, TableDescription, TimeToLiveSpecification, TimeToLiveStatus,
};
use base64::Engine as _;

/// Creating a resource on the local endpoint failed.
#[derive(Debug, thiserror::Error)]
#[error("bootstrap {resource}: {message}")]
pub struct BootstrapError {
    resource: String,
    message: String,
}

impl BootstrapError {
    fn new(resource: &str, err: impl std::fmt::Display) -> Self {
        Self { resource: resource.to_owned(), message: err.to_string() }
    }
}

/// Creates every table (with its indexes and TTL), queue, bucket and secret the template declares
/// that does not exist yet, named `{prefix}{LogicalId}` (buckets in lowercase). New secrets get random material, except those
/// an operator sets, which are created without a value as in AWS; existing ones are kept as they
/// are. A table that exists must match the template (keys, attribute types, indexes and their
/// projections, TTL); otherwise the error lists what differs.
pub async fn bootstrap(sdk: &SdkConfig, template: &Template, prefix: &str) -> Result<(), BootstrapError> {
    let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
    let secrets = aws_sdk_secretsmanager::Client::new(sdk);
    for table in &template.tables {
        ensure_table(&dynamodb, table, prefix).await?;
    }
    create_queues(sdk, template, prefix).await?;
    for logical_id in &template.buckets {
        let bucket = object_storage::Bucket::new(crate::bucket_name(prefix, logical_id), sdk);
        object_storage::transfer::Transfer::new(bucket)
            .create_bucket()
            .await
            .map_err(|err| BootstrapError::new(logical_id, err))?;
    }
    for logical_id in &template.secrets {
        let mut request = secrets.create_secret().name(physical_name(prefix, logical_id));
        if !template.secrets_set_by_operator.contains(logical_id) {
            let mut material = [0u8; 48];
            getrandom::fill(&mut material).map_err(|err| BootstrapError::new(logical_id, err))?;
            request = request.secret_string(base64::engine::general_purpose::STANDARD_NO_PAD.encode(material));
        }
        match request.send().await {
            Ok(_) => {}
            Err(err) if err.as_service_error().is_some_and(|err| err.is_resource_exists_exception()) => {}
            Err(err) => {
                return Err(BootstrapError::new(logical_id, aws_sdk_secretsmanager::error::DisplayErrorContext(err)));
            }
        }
    }
    Ok(())
}

/// Creates `table` unless it exists; an existing one must match it.
async fn ensure_table(
    client: &aws_sdk_dynamodb::Client,
    table: &TableSpec,
    prefix: &str,
) -> Result<(), BootstrapError> {
    let name = physical_name(prefix, &table.logical_id);
    let fail = |err: &dyn std::fmt::Display| BootstrapError::new(&table.logical_id, err);
    let described = match client.describe_table().table_name(&name).send().await {
        Ok(output) => output.table,
        Err(err) if err.as_service_error().is_some_and(|err| err.is_resource_not_found_exception()) => None,
        Err(err) => return Err(fail(&aws_sdk_dynamodb::error::DisplayErrorContext(err))),
    };
    let Some(described) = described else { return create_table(client, table, &name).await };
    let ttl = client
        .describe_time_to_live()
        .table_name(&name)
        .send()
        .await
        .map_err(|err| fail(&aws_sdk_dynamodb::error::DisplayErrorContext(err)))?
        .time_to_live_description
        .filter(|ttl| matches!(ttl.time_to_live_status, Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)))
        .and_then(|ttl| ttl.attribute_name);
    let differences = table_differences(table, &described, ttl.as_deref());
    if differences.is_empty() {
        return Ok(());
    }
    Err(fail(&format!(
        "table {name} exists and differs from template.yaml: {}; delete it (or restart the local endpoint) to recreate it",
        differences.join("; ")
    )))
}

/// What differs between the template's `table` and an existing table: keys, attribute types,
/// indexes (keys and projections) and the TTL attribute. Empty when they match.
fn table_differences(table: &TableSpec, existing: &TableDescription, ttl_attribute: Option<&str>) -> Vec<String> {
    let mut differences = Vec::new();
    let key_of = |elements: &[KeySchemaElement]| KeySchema {
        hash: elements
            .iter()
            .find(|e| e.key_type == KeyType::Hash)
            .map(|e| e.attribute_name.clone())
            .unwrap_or_default(),
        range: elements.iter().find(|e| e.key_type == KeyType::Range).map(|e| e.attribute_name.clone()),
    };
    let existing_key = key_of(existing.key_schema());
    if existing_key != table.key {
        differences.push(format!("key is {existing_key:?}, the template's {:?}", table.key));
    }
    for (attribute, kind) in &table.attributes {
        let found = existing.attribute_definitions().iter().find(|d| &d.attribute_name == attribute);
        match found.map(|d| d.attribute_type.as_str()) {
            Some(existing_kind) if existing_kind == kind => {}
            Some(existing_kind) => differences.push(format!("attribute {attribute} is {existing_kind}, not {kind}")),
            None => differences.push(format!("attribute {attribute} is not defined")),
        }
    }
    let existing_indexes = existing.global_secondary_indexes();
    for index in &table.indexes {
        let Some(found) = existing_indexes.iter().find(|i| i.index_name() == Some(index.name.as_str())) else {
            differences.push(format!("index {} is missing", index.name));
            continue;
        };
        if key_of(found.key_schema()) != index.key {
            differences.push(format!("index {} has another key", index.name));
        }
        let projection = found.projection();
        let kind = projection.and_then(|p| p.projection_type()).map_or("", |kind| kind.as_str());
        let mut non_key: Vec<String> = projection.map(|p| p.non_key_attributes().to_vec()).unwrap_or_default();
        let mut wanted = index.non_key_attributes.clone();
        non_key.sort();
        wanted.sort();
        if kind != index.projection || non_key != wanted {
            differences
                .push(format!("index {} projects {kind} {non_key:?}, not {} {wanted:?}", index.name, index.projection));
        }
    }
    for found in existing_indexes {
        let name = found.index_name().unwrap_or_default();
        if !table.indexes.iter().any(|index| index.name == name) {
            differences.push(format!("index {name} is not in the template"));
        }
    }
    if ttl_attribute != table.ttl_attribute.as_deref() {
        differences.push(format!("TTL attribute is {ttl_attribute:?}, not {:?}", table.ttl_attribute));
    }
    differences
}

/// Creates `table` as `name`, with its indexes and TTL.
async fn create_table(client: &aws_sdk_dynamodb::Client, table: &TableSpec, name: &str) -> Result<(), BootstrapError> {
    let fail = |err: &dyn std::fmt::Display| BootstrapError::new(&table.logical_id, err);
    let mut request = client.create_table().table_name(name).billing_mode(BillingMode::PayPerRequest);
    for (attribute, kind) in &table.attributes {
        request = request.attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(attribute)
                .attribute_type(ScalarAttributeType::from(kind.as_str()))
                .build()
                .map_err(|e| fail(&e))?,
        );
    }
    request = request.set_key_schema(Some(key_schema(&table.key).map_err(|e| fail(&e))?));
    for index in &table.indexes {
        let projection = Projection::builder()
            .projection_type(ProjectionType::from(index.projection.as_str()))
            .set_non_key_attributes((!index.non_key_attributes.is_empty()).then(|| index.non_key_attributes.clone()))
            .build();
        request = request.global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(&index.name)
                .set_key_schema(Some(key_schema(&index.key).map_err(|e| fail(&e))?))
                .projection(projection)
                .build()
                .map_err(|e| fail(&e))?,
        );
    }
    request.send().await.map_err(|err| fail(&aws_sdk_dynamodb::error::DisplayErrorContext(err)))?;
    if let Some(attribute) = &table.ttl_attribute {
        client
            .update_time_to_live()
            .table_name(name)
            .time_to_live_specification(
                TimeToLiveSpecification::builder()
                    .attribute_name(attribute)
                    .enabled(true)
                    .build()
                    .map_err(|e| fail(&e))?,
            )
            .send()
            .await
            .map_err(|err| fail(&aws_sdk_dynamodb::error::DisplayErrorContext(err)))?;
    }
    Ok(())
}

fn key_schema(key: &KeySchema) -> Result<Vec<KeySchemaElement>, aws_sdk_dynamodb::error::BuildError> {
    let mut elements = vec![KeySchemaElement::builder().attribute_name(&key.hash).key_type(KeyType::Hash).build()?];
    if let Some(range) = &key.range {
        elements.push(KeySchemaElement::builder().attribute_name(range).key_type(KeyType::Range).build()?);
    }
    Ok(elements)
}

/// Creates every queue, then points each at its dead-letter queue (which needs its ARN).
async fn create_queues(sdk: &SdkConfig, template: &Template, prefix: &str) -> Result<(), BootstrapError> {
    use aws_sdk_sqs::types::QueueAttributeName;
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let mut urls = std::collections::HashMap::new();
    for queue in &template.queues {
        let fail = |err: &dyn std::fmt::Display| BootstrapError::new(&queue.logical_id, err);
        let mut request = sqs.create_queue().queue_name(physical_name(prefix, &queue.logical_id));
        if let Some(seconds) = queue.visibility_timeout {
            request = request.attributes(QueueAttributeName::VisibilityTimeout, seconds.to_string());
        }
        if let Some(seconds) = queue.message_retention {
            request = request.attributes(QueueAttributeName::MessageRetentionPeriod, seconds.to_string());
        }
        // CreateQueue returns the existing queue when its attributes are the same, and refuses it
        // (QueueAlreadyExists, QueueNameExists) when they differ.
        let output = request.send().await.map_err(|err| fail(&aws_sdk_sqs::error::DisplayErrorContext(err)))?;
        urls.insert(queue.logical_id.clone(), output.queue_url.unwrap_or_default());
    }
    for queue in &template.queues {
        let Some((target, max_receive)) = &queue.dead_letter else { continue };
        let fail = |err: &dyn std::fmt::Display| BootstrapError::new(&queue.logical_id, err);
        let target_url =
            urls.get(target).ok_or_else(|| fail(&format!("dead-letter queue {target} is not declared")))?;
        let attributes = sqs
            .get_queue_attributes()
            .queue_url(target_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .map_err(|err| fail(&aws_sdk_sqs::error::DisplayErrorContext(err)))?;
        let arn = attributes.attributes.and_then(|mut a| a.remove(&QueueAttributeName::QueueArn)).unwrap_or_default();
        let policy = format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":"{max_receive}"}}"#);
        sqs.set_queue_attributes()
            .queue_url(urls.get(&queue.logical_id).cloned().unwrap_or_default())
            .attributes(QueueAttributeName::RedrivePolicy, policy)
            .send()
            .await
            .map_err(|err| fail(&aws_sdk_sqs::error::DisplayErrorContext(err)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::IndexSpec;
    use aws_sdk_dynamodb::types::GlobalSecondaryIndexDescription;

    fn spec() -> TableSpec {
        TableSpec {
            logical_id: "RunsTable".into(),
            attributes: vec![("pk".into(), "S".into()), ("owner".into(), "S".into())],
            key: KeySchema { hash: "pk".into(), range: None },
            indexes: vec![IndexSpec {
                name: "by-owner".into(),
                key: KeySchema { hash: "owner".into(), range: Some("pk".into()) },
                projection: "INCLUDE".into(),
                non_key_attributes: vec!["status".into(), "agent".into()],
            }],
            ttl_attribute: Some("expires_at".into()),
        }
    }

    /// The table DynamoDB describes after creating `spec` (non-key attributes in another order).
    fn described(spec: &TableSpec) -> TableDescription {
        let definition = |(name, kind): &(String, String)| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(ScalarAttributeType::from(kind.as_str()))
                .build()
                .unwrap()
        };
        let mut table = TableDescription::builder()
            .set_key_schema(Some(key_schema(&spec.key).unwrap()))
            .set_attribute_definitions(Some(spec.attributes.iter().map(definition).collect()));
        for index in &spec.indexes {
            let mut non_key = index.non_key_attributes.clone();
            non_key.reverse();
            table = table.global_secondary_indexes(
                GlobalSecondaryIndexDescription::builder()
                    .index_name(&index.name)
                    .set_key_schema(Some(key_schema(&index.key).unwrap()))
                    .projection(
                        Projection::builder()
                            .projection_type(ProjectionType::from(index.projection.as_str()))
                            .set_non_key_attributes(Some(non_key))
                            .build(),
                    )
                    .build(),
            );
        }
        table.build()
    }

    #[test]
    fn a_table_made_from_the_template_matches_it() {
        assert_eq!(table_differences(&spec(), &described(&spec()), Some("expires_at")), Vec::<String>::new());
    }

    #[test]
    fn every_difference_is_named() {
        let mut other = spec();
        other.key.range = Some("sk".into());
        other.attributes.push(("sk".into(), "S".into()));
        other.attributes[1].1 = "N".into();
        other.indexes[0].projection = "ALL".into();
        other.indexes[0].non_key_attributes.clear();
        other.indexes.push(IndexSpec { name: "stale".into(), ..spec().indexes[0].clone() });
        let differences = table_differences(&spec(), &described(&other), None);
        let text = differences.join("\n");
        for expected in [
            "key is",
            "attribute owner is N, not S",
            "index by-owner projects ALL [], not INCLUDE",
            "index stale is not in the template",
            "TTL attribute is None, not Some(\"expires_at\")",
        ] {
            assert!(text.contains(expected), "{expected:?} missing from:\n{text}");
        }
        let mut without_index = spec();
        without_index.indexes.clear();
        let differences = table_differences(&spec(), &described(&without_index), Some("expires_at"));
        assert_eq!(differences, vec!["index by-owner is missing".to_owned()]);
    }
}
