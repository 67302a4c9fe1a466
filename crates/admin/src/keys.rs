//! Access keys through the admin API (the root user's; `permafrost key …` talks to these endpoints when a
//! server is running):
//!
//! | request | answer |
//! |---|---|
//! | `GET /keys` | every key without its secret |
//! | `POST /keys` `{"name": N, "create_buckets": false}` | `201`, the new key *with its secret* (shown only here) |
//! | `GET /keys/{name}` | one key |
//! | `PUT /keys/{name}` `{"enabled": B, "create_buckets": B}` (each optional) | the key after the change |
//! | `POST /keys/{name}/allow` `{"bucket": B, "permission": "read"\|"write"\|"delete"\|"owner"}` | the key |
//! | `POST /keys/{name}/deny` (same body) | the key |
//! | `DELETE /keys/{name}` | `{"deleted": N}`; the buckets it owned become the root user's |
//!
//! Every change is an event (`key`) and one log line, naming the key (never its secret).

use http::{Method, StatusCode};
use permafrost_access::{AccessError, Permission};
use serde::Deserialize;

use crate::router::{blocking, handler, json, json_status, ApiError, ApiRequest, ApiResult};
use crate::Admin;

impl From<AccessError> for ApiError {
    fn from(e: AccessError) -> ApiError {
        match e {
            AccessError::NoSuchKey(_) => ApiError::not_found(e.to_string()),
            AccessError::Exists(_) => {
                ApiError::new(StatusCode::CONFLICT, "KeyExists", e.to_string())
            }
            AccessError::Invalid(m) | AccessError::MalformedPolicy(m) => ApiError::bad_request(m),
            AccessError::Blocked(m) => ApiError::new(StatusCode::FORBIDDEN, "AccessDenied", m),
            AccessError::NoSuchBucket(_) => ApiError::not_found(e.to_string()),
            AccessError::Catalog(c) => c.into(),
        }
    }
}

pub(crate) fn add_routes(admin: &Admin) {
    admin.route(Method::GET, "/keys", handler(list));
    admin.route(Method::POST, "/keys", handler(create));
    admin.route(Method::GET, "/keys/{name}", handler(info));
    admin.route(Method::PUT, "/keys/{name}", handler(update));
    admin.route(Method::DELETE, "/keys/{name}", handler(delete));
    admin.route(Method::POST, "/keys/{name}/allow", handler(allow));
    admin.route(Method::POST, "/keys/{name}/deny", handler(deny));
}

/// Record a change to keys: an event and one log line.
fn changed(admin: &Admin, text: String, data: serde_json::Value) {
    tracing::info!(target: "permafrost_admin::keys", "{text}");
    admin.events().emit("key", text, data);
}

async fn list(admin: Admin, _: ApiRequest) -> ApiResult {
    json(&admin.access().keys())
}

async fn info(admin: Admin, request: ApiRequest) -> ApiResult {
    json(&admin.access().key_info(request.param("name"))?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewKey {
    name: String,
    #[serde(default)]
    create_buckets: bool,
}

async fn create(admin: Admin, request: ApiRequest) -> ApiResult {
    let body: NewKey = request.json()?;
    let access = admin.access().clone();
    let key = blocking(move || Ok(access.create_key(&body.name, body.create_buckets)?)).await?;
    changed(
        &admin,
        format!(
            "access key {} ({}) created{}",
            key.name,
            key.access_key,
            if key.create_buckets {
                ", may create buckets"
            } else {
                ""
            }
        ),
        serde_json::json!({ "action": "create", "key": key.name, "access_key": key.access_key }),
    );
    Ok(json_status(StatusCode::CREATED, &key))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyChange {
    enabled: Option<bool>,
    create_buckets: Option<bool>,
}

async fn update(admin: Admin, request: ApiRequest) -> ApiResult {
    let body: KeyChange = request.json()?;
    if body.enabled.is_none() && body.create_buckets.is_none() {
        return Err(ApiError::bad_request(
            "a key change names enabled and/or create_buckets (true or false)",
        ));
    }
    let name = request.param("name").to_string();
    let access = admin.access().clone();
    let key =
        blocking(move || Ok(access.update_key(&name, body.enabled, body.create_buckets)?)).await?;
    let mut what = Vec::new();
    if let Some(e) = body.enabled {
        what.push(if e { "enabled" } else { "disabled" });
    }
    if let Some(c) = body.create_buckets {
        what.push(if c {
            "may create buckets"
        } else {
            "may not create buckets"
        });
    }
    changed(
        &admin,
        format!("access key {}: {}", key.name, what.join(", ")),
        serde_json::json!({ "action": "update", "key": key.name, "enabled": body.enabled,
                            "create_buckets": body.create_buckets }),
    );
    json(&key)
}

async fn delete(admin: Admin, request: ApiRequest) -> ApiResult {
    let name = request.param("name").to_string();
    let access = admin.access().clone();
    let gone = name.clone();
    blocking(move || Ok(access.delete_key(&gone)?)).await?;
    changed(
        &admin,
        format!("access key {name} deleted"),
        serde_json::json!({ "action": "delete", "key": name }),
    );
    json(&serde_json::json!({ "deleted": request.param("name") }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Grant {
    bucket: String,
    permission: String,
}

async fn allow(admin: Admin, request: ApiRequest) -> ApiResult {
    set(admin, request, true).await
}

async fn deny(admin: Admin, request: ApiRequest) -> ApiResult {
    set(admin, request, false).await
}

async fn set(admin: Admin, request: ApiRequest, allowed: bool) -> ApiResult {
    let body: Grant = request.json()?;
    let permission = Permission::parse(&body.permission)?;
    let name = request.param("name").to_string();
    let access = admin.access().clone();
    let bucket = body.bucket.clone();
    let key =
        blocking(move || Ok(access.set_permission(&name, &bucket, permission, allowed)?)).await?;
    changed(
        &admin,
        format!(
            "access key {}: {} {permission} on bucket {}",
            key.name,
            if allowed { "granted" } else { "revoked" },
            body.bucket
        ),
        serde_json::json!({ "action": if allowed { "allow" } else { "deny" }, "key": key.name,
                            "bucket": body.bucket, "permission": permission }),
    );
    json(&key)
}
