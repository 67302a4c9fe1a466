//! What the operator's view (`permafrost-admin`) reads of a store beyond [`Store::status`]: small, read-only,
//! from the catalog and memory only (no disk is touched).

use permafrost_catalog::{Catalog, Outstanding};

use crate::store::Store;
use crate::Result;

impl Store {
    /// Contents waiting to be persisted, per grid bucket (with the age of the oldest).
    pub fn catalog_outstanding(&self) -> Result<Vec<Outstanding>> {
        Ok(self.inner().catalog.outstanding()?)
    }

    /// The catalog, for the operator's own tables (history, webhooks).
    pub fn catalog(&self) -> &dyn Catalog {
        self.inner().catalog.as_ref()
    }
}
