//! Run-time changes kept in the configuration file (`DATA/permafrost.toml`): the file is edited in place with
//! `toml_edit`, so the operator's comments and layout survive, and replaced atomically (written beside, synced,
//! renamed).

use std::path::Path;

use permafrost_policy::WatchdogConfig;

use crate::ApiError;

/// Set `[store.watchdog]` of the configuration file at `path` to `watchdog` (creating the tables if missing).
pub fn save_watchdog(path: &Path, watchdog: &WatchdogConfig) -> Result<(), ApiError> {
    let fail = |what: String| ApiError::internal(format!("{}: {what}", path.display()));
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(fail(format!("cannot read it: {e}"))),
    };
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| fail(format!("not valid TOML: {e}")))?;
    let store = doc
        .entry("store")
        .or_insert_with(|| toml_edit::Item::Table(toml_edit::Table::new()))
        .as_table_mut()
        .ok_or_else(|| fail("[store] is not a table".into()))?;
    let table = store
        .entry("watchdog")
        .or_insert_with(|| toml_edit::Item::Table(toml_edit::Table::new()))
        .as_table_mut()
        .ok_or_else(|| fail("[store.watchdog] is not a table".into()))?;
    let int = |v: u64| toml_edit::value(i64::try_from(v).unwrap_or(i64::MAX));
    table["interval_ms"] = int(watchdog.interval_ms);
    table["max_age_ms"] = int(watchdog.max_age_ms);
    table["persist_spinning_after_ms"] = int(watchdog.persist_spinning_after_ms);
    table["start_off_disk_above_bytes"] = int(watchdog.start_off_disk_above_bytes);
    table["persist_spinning_above_bytes"] = int(watchdog.persist_spinning_above_bytes);
    table["pressure_fill_percent"] = toml_edit::value(watchdog.pressure_fill_percent);
    table["persist_under_pressure_above_bytes"] = int(watchdog.persist_under_pressure_above_bytes);
    permafrost_disk::durable::write_durable(path, doc.to_string().as_bytes())
        .map_err(|e| fail(format!("cannot write it: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_is_written_in_place_keeping_comments_and_other_tables() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("permafrost.toml");
        std::fs::write(
            &path,
            "# my archive\n[server]\nlisten = \"127.0.0.1:9000\"\n\n[store]\n# keep this\ncache_bytes_max = 1000\n\n[store.watchdog]\nmax_age_ms = 5\n",
        )
        .unwrap();
        let watchdog = WatchdogConfig {
            max_age_ms: 60_000,
            pressure_fill_percent: 85.5,
            ..WatchdogConfig::default()
        };
        save_watchdog(&path, &watchdog).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# my archive\n[server]"), "{text}");
        assert!(
            text.contains("# keep this\ncache_bytes_max = 1000"),
            "{text}"
        );
        let parsed: toml::Table = toml::from_str(&text).unwrap();
        let back: WatchdogConfig = parsed["store"]["watchdog"].clone().try_into().unwrap();
        assert_eq!(back, watchdog);
        // A file without the tables gets them.
        let bare = dir.path().join("bare.toml");
        save_watchdog(&bare, &watchdog).unwrap();
        let parsed: toml::Table = toml::from_str(&std::fs::read_to_string(&bare).unwrap()).unwrap();
        let back: WatchdogConfig = parsed["store"]["watchdog"].clone().try_into().unwrap();
        assert_eq!(back, watchdog);
    }
}
