//! `permafrost grid add-disk` against a running server: the server keeps the grid open (and its data directory
//! locked), so the add goes through its admin API (`POST /_permafrost/api/v1/disks`), which grows the open grid
//! in place (docs/grid.md "Growing a grid"). The server is `--server URL`, or the one that holds the grid's data
//! directory and wrote its address in `DATA/endpoint`.
//!
//! **Invariants.** A grid whose data directory is locked by a running server is never opened here; a refusal
//! of the server (a disk larger than its parity disk, a taken column) is printed with its reason.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use permafrost_disk::power::PowerControl;

use crate::object::remote::Remote;
use crate::object::Target;

/// The server to ask: `server`, else the one running on the grid's data directory (`DIR/..`); `None` when no
/// server has the grid open.
pub(crate) fn server_for(grid_dir: &Path, server: Option<&str>) -> Option<String> {
    if let Some(server) = server {
        return Some(server.to_string());
    }
    let data_dir = grid_dir.parent()?;
    if !crate::data_dir::is_locked(data_dir) {
        return None;
    }
    crate::data_dir::running_server_endpoint(data_dir)
}

/// What `grid add-disk` asks for.
pub(crate) struct NewDisk {
    pub device: Option<PathBuf>,
    pub size: Option<u64>,
    pub power_control: Option<PowerControl>,
    pub row: Option<usize>,
    pub column: Option<usize>,
}

/// Add the disk through the server at `endpoint`; prints its report (JSON with `json`).
pub(crate) fn add_disk_on_server(
    endpoint: &str,
    grid_dir: &Path,
    disk: NewDisk,
    json: bool,
) -> Result<()> {
    let data_dir = grid_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let remote = Remote::connect(endpoint, &Target::of_server(data_dir, endpoint))?;
    let mut body = serde_json::json!({ "row": disk.row, "column": disk.column });
    match (disk.device, disk.size) {
        (Some(device), None) => {
            body["device"] = serde_json::json!(device);
            if let Some(control) = disk.power_control {
                body["power_control"] = serde_json::to_value(control)?;
            }
        }
        (None, Some(size)) => body["size"] = size.into(),
        _ => anyhow::bail!("give either --device or --size"),
    }
    let report = remote
        .admin("POST", "/_permafrost/api/v1/disks", Some(&body))
        .with_context(|| format!("the server at {endpoint} did not add the disk"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "disk {} added to the running server's grid as bucket {} ({} bytes) in row (horizontal parity group) {} \
         and column {}, parity disks {} and {}, in {} ms; grid now {} (geometry version {}); {} spin-ups of \
         other disks; new objects may go to it at once",
        report["disk"],
        report["bucket"],
        report["capacity_bytes"],
        report["hpg"],
        report["column"],
        report["hp"],
        report["vp"],
        report["millis"],
        report["geometry"].as_str().unwrap_or("?"),
        report["geometry_version"],
        report["other_disks_spin_ups"],
    );
    Ok(())
}
