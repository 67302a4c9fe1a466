//! What the operator's view (`permafrost-admin`) reads of a store beyond [`Store::status`]: small, read-only,
//! from the catalog and memory only (no disk is touched).

use std::sync::Arc;

use permafrost_catalog::{Catalog, Outstanding};
use permafrost_policy::WatchdogConfig;

use crate::store::Store;
use crate::{Result, StoreError};

impl Store {
    /// Contents waiting to be persisted, per grid bucket (with the age of the oldest).
    pub fn catalog_outstanding(&self) -> Result<Vec<Outstanding>> {
        Ok(self.inner().catalog.outstanding()?)
    }

    /// Whether the store can serve: its catalog's database answers (`StoreError::Unavailable` when it does not).
    /// The readiness probe asks this (`/_permafrost/ready`); nothing on disk is touched.
    pub fn ready(&self) -> Result<()> {
        Ok(self.inner().catalog.ping()?)
    }

    /// The catalog, for the operator's own tables (history, webhooks).
    pub fn catalog(&self) -> &dyn Catalog {
        self.inner().catalog.as_ref()
    }

    /// The catalog's tables of access keys and bucket access (`permafrost-access` decides from them).
    pub fn access_catalog(&self) -> Arc<dyn permafrost_catalog::AccessCatalog> {
        Arc::clone(&self.inner().access_catalog)
    }

    /// The watchdog's thresholds in force (the configuration's, or the last [`Store::set_watchdog`]).
    pub fn watchdog(&self) -> WatchdogConfig {
        self.inner().persister.watchdog()
    }

    /// Change the watchdog's thresholds while running (the caller keeps them in the configuration file).
    /// Refuses values that would make it misbehave, naming them.
    pub fn set_watchdog(&self, config: WatchdogConfig) -> Result<()> {
        if config.interval_ms < 10 {
            return Err(StoreError::InvalidArgument(format!(
                "watchdog interval_ms {}: at least 10",
                config.interval_ms
            )));
        }
        let fill = config.pressure_fill_percent;
        if !(fill.is_finite() && fill > 0.0 && fill <= 100.0) {
            return Err(StoreError::InvalidArgument(format!(
                "watchdog pressure_fill_percent {fill}: more than 0 and at most 100"
            )));
        }
        self.inner().persister.set_watchdog(config);
        self.inner().wake_persister();
        Ok(())
    }
}
