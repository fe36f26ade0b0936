//! Operator actions on external applications (the admin CLI's `app` commands).

use crate::access::{ExternalApp, SCOPE, parse_scopes};
use crate::store::{AppStore, DirectoryStore, StoreError};
use chrono::{DateTime, Utc};
use credentials::Peppers;
use serde::Serialize;

/// Why an operator action was refused.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("unknown organization(s): {0:?}; import them first")]
    UnknownOrganizations(Vec<i64>),
    #[error("no external application with client_id {0:?}")]
    UnknownApplication(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The credentials of a new application; the secret is shown here and never again.
#[derive(Debug, Serialize)]
pub struct IssuedCredentials {
    pub client_id: String,
    pub client_secret: String,
}

/// An application as operators list it (never its secret hash).
#[derive(Debug, Serialize)]
pub struct AppSummary {
    pub client_id: String,
    pub name: String,
    pub active: bool,
    pub organization_ids: Vec<i64>,
    pub scopes: Vec<&'static str>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The scopes named, known ones only; `meetings:read` is always granted, so naming it adds nothing.
fn extra_scopes(scopes: &[&str]) -> Result<Vec<&'static str>, AdminError> {
    let parsed = parse_scopes(&scopes.join(" ")).map_err(|unknown| {
        AdminError::Invalid(format!("unknown scope {unknown:?}; scopes are {:?}", crate::access::SCOPES))
    })?;
    Ok(parsed.into_iter().filter(|scope| *scope != SCOPE).collect())
}

/// Creates an active application linked to existing organizations, granted `scopes` besides
/// `meetings:read`.
pub async fn create_app(
    apps: &AppStore,
    directory: &DirectoryStore,
    peppers: &Peppers,
    name: &str,
    organization_ids: &[i64],
    scopes: &[&str],
    now: DateTime<Utc>,
) -> Result<IssuedCredentials, AdminError> {
    if name.trim().is_empty() {
        return Err(AdminError::Invalid("the application needs a non-empty --name".into()));
    }
    if organization_ids.is_empty() {
        return Err(AdminError::Invalid("link the application to at least one --org".into()));
    }
    let mut ids = organization_ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let extra = extra_scopes(scopes)?;
    require_organizations(directory, &ids).await?;
    let (mut app, client_secret) = ExternalApp::create(name.trim(), ids, peppers, now);
    app.extra_scopes = extra.into_iter().map(str::to_owned).collect();
    apps.insert(&app).await?;
    Ok(IssuedCredentials { client_id: app.client_id, client_secret })
}

/// Deactivates an application: its credentials and tokens stop working at once.
pub async fn deactivate_app(apps: &AppStore, client_id: &str, now: DateTime<Utc>) -> Result<AppSummary, AdminError> {
    update(apps, client_id, now, |app| {
        app.active = false;
        Ok(())
    })
    .await
}

/// Links an existing organization to an application.
pub async fn link_organization(
    apps: &AppStore,
    directory: &DirectoryStore,
    client_id: &str,
    organization_id: i64,
    now: DateTime<Utc>,
) -> Result<AppSummary, AdminError> {
    require_organizations(directory, &[organization_id]).await?;
    update(apps, client_id, now, |app| {
        if !app.organization_ids.contains(&organization_id) {
            app.organization_ids.push(organization_id);
            app.organization_ids.sort_unstable();
        }
        Ok(())
    })
    .await
}

/// Unlinks an organization from an application; its tokens lose access at once.
pub async fn unlink_organization(
    apps: &AppStore,
    client_id: &str,
    organization_id: i64,
    now: DateTime<Utc>,
) -> Result<AppSummary, AdminError> {
    update(apps, client_id, now, |app| {
        if !app.organization_ids.contains(&organization_id) {
            return Err(AdminError::Invalid(format!("organization {organization_id} is not linked to {client_id}")));
        }
        app.organization_ids.retain(|id| *id != organization_id);
        Ok(())
    })
    .await
}

/// Grants scopes to an application (its tokens ask for them with `scope`).
pub async fn grant_scopes(
    apps: &AppStore,
    client_id: &str,
    scopes: &[&str],
    now: DateTime<Utc>,
) -> Result<AppSummary, AdminError> {
    let extra = extra_scopes(scopes)?;
    update(apps, client_id, now, |app| {
        for scope in &extra {
            if !app.has_scope(scope) {
                app.extra_scopes.push((*scope).to_owned());
            }
        }
        Ok(())
    })
    .await
}

/// Takes scopes away from an application; tokens issued with them lose them at once.
/// `meetings:read` cannot be revoked (deactivate the application instead).
pub async fn revoke_scopes(
    apps: &AppStore,
    client_id: &str,
    scopes: &[&str],
    now: DateTime<Utc>,
) -> Result<AppSummary, AdminError> {
    if scopes.contains(&SCOPE) {
        return Err(AdminError::Invalid(format!("{SCOPE} is always granted; deactivate the application instead")));
    }
    let extra = extra_scopes(scopes)?;
    update(apps, client_id, now, |app| {
        app.extra_scopes.retain(|granted| !extra.contains(&granted.as_str()));
        Ok(())
    })
    .await
}

/// Every application, oldest first.
pub async fn list_apps(apps: &AppStore) -> Result<Vec<AppSummary>, AdminError> {
    Ok(apps.list().await?.into_iter().map(AppSummary::from).collect())
}

async fn update(
    apps: &AppStore,
    client_id: &str,
    now: DateTime<Utc>,
    change: impl Fn(&mut ExternalApp) -> Result<(), AdminError>,
) -> Result<AppSummary, AdminError> {
    let mut app = apps.get(client_id).await?.ok_or_else(|| AdminError::UnknownApplication(client_id.to_owned()))?;
    change(&mut app)?;
    app.touch(now);
    apps.replace(&app).await?;
    Ok(AppSummary::from(app))
}

async fn require_organizations(directory: &DirectoryStore, ids: &[i64]) -> Result<(), AdminError> {
    let found: Vec<i64> = directory.organizations(ids).await?.into_iter().map(|o| o.id).collect();
    let missing: Vec<i64> = ids.iter().copied().filter(|id| !found.contains(id)).collect();
    if missing.is_empty() { Ok(()) } else { Err(AdminError::UnknownOrganizations(missing)) }
}

impl From<ExternalApp> for AppSummary {
    fn from(app: ExternalApp) -> Self {
        let scopes = app.scopes();
        Self {
            client_id: app.client_id,
            name: app.name,
            active: app.active,
            scopes,
            organization_ids: app.organization_ids,
            created_at: app.created_at,
            updated_at: app.updated_at,
        }
    }
}
