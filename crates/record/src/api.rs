//! The recorder's endpoints of the admin API, below `/_permafrost/api/v1` (JSON in and out):
//!
//! | request | body | answer |
//! |---|---|---|
//! | `GET /record` | | [`RecorderStatus`] |
//! | `POST /record/scans` | [`ScanSpec`] | `201` and the scan's [`ScanStatus`] |
//! | `GET /record/scans/{experiment}/{station}/{scan}` | | its [`ScanStatus`] |
//! | `POST /record/scans/{experiment}/{station}/{scan}/stop` | | its final [`ScanStatus`] (waits until the object is finished) |
//! | `POST /record/schedule` | `{"defaults": ScheduleDefaults, "text": "…"}` | `201` and the scans added |
//! | `DELETE /record/schedule` | | `{"removed": N}` |
//!
//! Errors are `400` (bad input: names, sizes, a schedule in the past…), `404` (no such scan), `409` (the scan
//! exists or runs, the port is taken) and `500`, each with a message that says what was wrong. [`call`] is
//! the endpoints without HTTP; [`add_endpoints`] adds them to the admin router, which calls them on a blocking
//! thread (authentication is the router's).

use std::sync::Arc;

use http::{Method, StatusCode};
use permafrost_admin::{blocking, handler, json_status, Admin, ApiError};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::recorder::{RecordError, Recorder, ScheduleDefaults};
use crate::ScanSpec;

/// The routes: `(method, pattern below /_permafrost/api/v1, endpoint)`.
pub const ROUTES: [(&str, &str, Endpoint); 6] = [
    ("GET", "/record", Endpoint::Status),
    ("POST", "/record/scans", Endpoint::Start),
    (
        "GET",
        "/record/scans/{experiment}/{station}/{scan}",
        Endpoint::ScanStatus,
    ),
    (
        "POST",
        "/record/scans/{experiment}/{station}/{scan}/stop",
        Endpoint::Stop,
    ),
    ("POST", "/record/schedule", Endpoint::Schedule),
    ("DELETE", "/record/schedule", Endpoint::ClearSchedule),
];

/// One endpoint of [`ROUTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Status,
    Start,
    ScanStatus,
    Stop,
    Schedule,
    ClearSchedule,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleRequest {
    defaults: ScheduleDefaults,
    text: String,
}

fn body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, RecordError> {
    serde_json::from_slice(bytes).map_err(|e| RecordError::BadRequest(format!("request body: {e}")))
}

fn to_json(value: &impl serde::Serialize) -> Result<Value, RecordError> {
    serde_json::to_value(value).map_err(|e| RecordError::Internal(e.to_string()))
}

/// Answer `endpoint` (`id` = `experiment/station/scan` from the path, where it has one): `(HTTP status, JSON)`.
pub fn call(
    recorder: &Recorder,
    endpoint: Endpoint,
    id: &str,
    request_body: &[u8],
) -> Result<(u16, Value), RecordError> {
    match endpoint {
        Endpoint::Status => Ok((200, to_json(&recorder.status())?)),
        Endpoint::Start => {
            let spec: ScanSpec = body(request_body)?;
            Ok((201, to_json(&recorder.start(spec)?)?))
        }
        Endpoint::ScanStatus => Ok((200, to_json(&recorder.scan_status(id)?)?)),
        Endpoint::Stop => Ok((200, to_json(&recorder.stop(id)?)?)),
        Endpoint::Schedule => {
            let request: ScheduleRequest = body(request_body)?;
            Ok((
                201,
                to_json(&recorder.schedule(&request.defaults, &request.text)?)?,
            ))
        }
        Endpoint::ClearSchedule => Ok((200, json!({ "removed": recorder.clear_schedule() }))),
    }
}

/// Add the [`ROUTES`] to the admin API's router, answered by `recorder`.
pub fn add_endpoints(admin: &Admin, recorder: &Arc<Recorder>) {
    for (method, pattern, endpoint) in ROUTES {
        let method =
            Method::from_bytes(method.as_bytes()).expect("the routes' methods are HTTP methods");
        let recorder = Arc::clone(recorder);
        admin.route(
            method,
            pattern,
            handler(move |_admin, request| {
                let recorder = Arc::clone(&recorder);
                async move {
                    let id = [
                        request.param("experiment"),
                        request.param("station"),
                        request.param("scan"),
                    ]
                    .join("/");
                    let (status, answer) = blocking(move || {
                        call(&recorder, endpoint, &id, &request.body).map_err(|e| api_error(&e))
                    })
                    .await?;
                    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
                    Ok(json_status(status, &answer))
                }
            }),
        );
    }
}

/// The answer to an error: `400`, `404`, `409` or `500` with its message.
fn api_error(error: &RecordError) -> ApiError {
    let message = error.to_string();
    match error {
        RecordError::BadRequest(_) => ApiError::bad_request(message),
        RecordError::NotFound(_) => ApiError::not_found(message),
        RecordError::Conflict(_) => ApiError::conflict(message),
        RecordError::Internal(_) => ApiError::internal(message),
    }
}
