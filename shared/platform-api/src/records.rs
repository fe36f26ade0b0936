//! An account's records as handlers read them: active (not soft-deleted), or the resource's 404.

use crate::envelope::ApiError;
use platform_data::ids::AccountId;
use platform_data::records::{Record, RecordBody, RecordStore};

/// Record `id` of the account if it exists and is not soft-deleted, else 404 naming `what` ("tool").
pub(crate) async fn active_record<T: RecordBody>(
    store: &RecordStore<T>,
    account: AccountId,
    id: T::Id,
    what: &str,
) -> Result<Record<T>, ApiError> {
    active(store.get(account, id).await?, what)
}

/// The record `found` if it is there and not soft-deleted, else 404 naming `what`; for a record
/// read together with other items.
pub(crate) fn active<T: RecordBody>(found: Option<Record<T>>, what: &str) -> Result<Record<T>, ApiError> {
    found.filter(|record| record.deleted_at.is_none()).ok_or_else(|| ApiError::not_found(what))
}
