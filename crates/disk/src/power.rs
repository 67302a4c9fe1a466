//! TODO (helper A): power model
