//! Webhooks: `POST` a JSON event to a URL once an object — or every object under a prefix, or in a bucket — is
//! fully persisted (every extent and all parity on disk: the moment a source copy may be deleted).
//!
//! Registered webhooks live in the catalog, so a restart forgets none. Delivery is **exactly once** as far as
//! the server can make it: a webhook is marked delivered in the same catalog transaction that records the
//! receiver's `2xx`, and a delivered webhook is never sent again (also after restarts). The one window left —
//! the server dying after the receiver answered `2xx` but before that transaction — makes the next server send
//! it again; every delivery carries `X-Permafrost-Webhook: ID` so a receiver can drop a repeat.
//!
//! A prefix (or bucket) webhook fires when at least one object is under it and no version waits (noncurrent
//! versions and those under a delete marker included; `objects` then counts versions); failed deliveries
//! (no `2xx`, or no answer within [`DELIVERY_TIMEOUT`]) are retried with a growing pause (1 s doubling, at most
//! [`RETRY_PAUSE_MAX`]). Only `http://` URLs (the server has no TLS client).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use permafrost_catalog::WebhookRecord;
use permafrost_store::{Store, StoreError, VersionQuery};

use crate::Admin;

/// Longest a receiver may take to answer.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest pause between retries.
pub const RETRY_PAUSE_MAX: Duration = Duration::from_secs(300);
/// Header naming the webhook in every delivery.
pub const WEBHOOK_HEADER: &str = "X-Permafrost-Webhook";

/// What a webhook waits for, persisted: `Some(objects, stored bytes)` once it is.
fn persisted(store: &Store, hook: &WebhookRecord) -> Result<Option<(u64, u64)>, StoreError> {
    let persisted = |state: permafrost_store::ContentState| state.as_str() == "persisted";
    if let Some(key) = &hook.key {
        return match store.head_object(&hook.bucket, key) {
            Ok(info) if persisted(info.state) => Ok(Some((1, info.stored_bytes))),
            Ok(_) | Err(StoreError::NoSuchKey { .. }) | Err(StoreError::NoSuchBucket(_)) => {
                Ok(None)
            }
            Err(e) => Err(e),
        };
    }
    // Every version under the prefix, noncurrent ones and those under a delete marker included: all of them
    // are on the grid before the webhook says so.
    let mut query = VersionQuery {
        prefix: hook.prefix.clone(),
        ..Default::default()
    };
    let (mut objects, mut bytes) = (0u64, 0u64);
    loop {
        let page = match store.list_object_versions(&hook.bucket, &query) {
            Ok(page) => page,
            Err(StoreError::NoSuchBucket(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        for version in &page.versions {
            if version.object.is_none() {
                continue; // a delete marker holds no bytes
            }
            match store.head_version(&hook.bucket, &version.key, Some(&version.version_id)) {
                Ok(info) if persisted(info.state) => {
                    objects += 1;
                    bytes += info.stored_bytes;
                }
                // Deleted meanwhile.
                Err(StoreError::NoSuchKey { .. } | StoreError::NoSuchVersion(_)) => {}
                Ok(_) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        match (page.is_truncated, page.next_key_marker) {
            (true, Some(key)) => {
                query.key_marker = Some(key);
                query.version_id_marker = page.next_version_id_marker;
            }
            _ => break,
        }
    }
    Ok((objects > 0).then_some((objects, bytes)))
}

/// The webhook deliverer's memory: when each failing webhook may be tried again.
#[derive(Default)]
pub(crate) struct Deliverer {
    next_try: HashMap<u64, Instant>,
    /// The last round could not read the webhooks (the catalog's database away): its line was logged once,
    /// the next rounds stay quiet until one succeeds.
    catalog_failing: bool,
}

impl Deliverer {
    /// Deliver every pending webhook whose target is persisted (and whose retry pause is over).
    pub(crate) fn run_once(&mut self, admin: &Admin) {
        let store = admin.store();
        let hooks = match store.catalog().webhooks() {
            Ok(h) => {
                if std::mem::take(&mut self.catalog_failing) {
                    tracing::warn!("webhooks: the catalog answers again; deliveries resume");
                }
                h
            }
            Err(e) => {
                if !std::mem::replace(&mut self.catalog_failing, true) {
                    tracing::warn!(
                        "webhooks: cannot read them from the catalog: {e}; retrying quietly until it answers"
                    );
                }
                return;
            }
        };
        self.next_try
            .retain(|id, _| hooks.iter().any(|h| h.id == *id));
        for hook in hooks.iter().filter(|h| h.delivered_ms.is_none()) {
            if self
                .next_try
                .get(&hook.id)
                .is_some_and(|t| Instant::now() < *t)
            {
                continue;
            }
            match persisted(store, hook) {
                Ok(Some((objects, bytes))) => self.deliver(admin, hook, objects, bytes),
                Ok(None) => {}
                Err(e) => tracing::warn!("webhook {}: cannot check {}: {e}", hook.id, target(hook)),
            }
        }
    }

    fn deliver(&mut self, admin: &Admin, hook: &WebhookRecord, objects: u64, bytes: u64) {
        let body = serde_json::json!({
            "event": "persisted",
            "webhook": hook.id,
            "bucket": hook.bucket,
            "key": hook.key,
            "prefix": if hook.key.is_none() { Some(&hook.prefix) } else { None },
            "objects": objects,
            "stored_bytes": bytes,
            "at_unix_ms": crate::unix_ms(),
        });
        let agent = ureq::AgentBuilder::new().timeout(DELIVERY_TIMEOUT).build();
        let result = agent
            .post(&hook.url)
            .set(WEBHOOK_HEADER, &hook.id.to_string())
            .send_json(body.clone());
        let catalog = admin.store().catalog();
        match result {
            Ok(_) => {
                match catalog.webhook_attempt(hook.id, None, Some(crate::unix_ms())) {
                    Ok(true) => admin.events().emit(
                        "webhook",
                        format!("webhook {} delivered: {} persisted", hook.id, target(hook)),
                        body,
                    ),
                    Ok(false) => {} // removed meanwhile
                    Err(e) => tracing::warn!(
                        "webhook {} was delivered but cannot be marked so (it will be sent again): {e}",
                        hook.id
                    ),
                }
                self.next_try.remove(&hook.id);
            }
            Err(e) => {
                let message = match e {
                    ureq::Error::Status(code, _) => format!("{} answered HTTP {code}", hook.url),
                    ureq::Error::Transport(t) => format!("{}: {t}", hook.url),
                };
                let pause = Duration::from_secs(1u64 << hook.attempts.min(9)).min(RETRY_PAUSE_MAX);
                tracing::warn!(
                    "webhook {} for {}: {message}; trying again in {} s",
                    hook.id,
                    target(hook),
                    pause.as_secs()
                );
                if let Err(e) = catalog.webhook_attempt(hook.id, Some(&message), None) {
                    tracing::warn!("webhook {}: cannot record the attempt: {e}", hook.id);
                }
                self.next_try.insert(hook.id, Instant::now() + pause);
            }
        }
    }
}

/// What a webhook waits for, in words.
pub fn target(hook: &WebhookRecord) -> String {
    match &hook.key {
        Some(key) => format!("{}/{key}", hook.bucket),
        None if hook.prefix.is_empty() => format!("bucket {}", hook.bucket),
        None => format!("{}/{}*", hook.bucket, hook.prefix),
    }
}
