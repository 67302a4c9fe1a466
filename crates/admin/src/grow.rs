//! `POST /disks`: grow the running server's grid by one data disk ([`permafrost_engine::Engine::add_disk_live`],
//! docs/grid.md "Growing a grid").
//!
//! The body names the disk, `{"device": "/dev/sdX"}` (a block device, optionally `"power_control"`) or
//! `{"size": 1073741824}` (a new sparse file `disks/disk-NN.img` in the grid directory; a string with a unit,
//! `"4TiB"`, works too), and optionally where, `"row"` (horizontal parity group) and `"column"`. The answer is the
//! engine's report plus the spin-ups of the other disks during the add (always 0: nothing else is touched).
//! A refusal (a disk larger than its parity disk, a taken column, a device of another grid) is a 400 with the
//! engine's message.
//!
//! **Invariants.** The add runs on a blocking thread, never on the server's runtime; the new bucket takes
//! objects as soon as the answer is sent (placement sees it in its next round).

use std::path::PathBuf;

use permafrost_disk::power::PowerControl;
use permafrost_engine::{AddDisk, DiskSpec};
use serde::Deserialize;

use crate::router::{blocking, json, ApiError, ApiRequest, ApiResult};
use crate::Admin;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewDisk {
    /// A block device.
    device: Option<PathBuf>,
    /// What spins the device down and up [default: simulated].
    power_control: Option<PowerControl>,
    /// A file-backed disk of this size: bytes, or a string with a unit.
    size: Option<Size>,
    /// The horizontal parity group.
    #[serde(alias = "hpg")]
    row: Option<usize>,
    column: Option<usize>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Size {
    Bytes(u64),
    Text(String),
}

/// Bytes from `1073741824`, `512MiB`, `4 TB`, `1.5GiB` (binary units with `i`, decimal without).
fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| {
        format!("size {text:?}: expected a number of bytes with an optional unit (4TiB, 512MB)")
    })?;
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit.trim_end_matches('b');
    let factor: u64 = match unit {
        "" => 1,
        "k" => 1000,
        "m" => 1000_u64.pow(2),
        "g" => 1000_u64.pow(3),
        "t" => 1000_u64.pow(4),
        "ki" => 1 << 10,
        "mi" => 1 << 20,
        "gi" => 1 << 30,
        "ti" => 1 << 40,
        _ => {
            return Err(format!(
                "size {text:?}: unknown unit (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
            ))
        }
    };
    Ok((number * factor as f64) as u64)
}

/// The spec of the disk a request names.
fn spec_of(body: &NewDisk, disks: usize) -> Result<DiskSpec, ApiError> {
    match (&body.device, &body.size) {
        (Some(path), None) => Ok(DiskSpec::Block {
            path: path.clone(),
            power_control: body
                .power_control
                .clone()
                .unwrap_or(PowerControl::Simulated),
        }),
        (None, Some(size)) => {
            if body.power_control.is_some() {
                return Err(ApiError::bad_request(
                    "power_control applies to a device, not to a file-backed disk",
                ));
            }
            let capacity_bytes = match size {
                Size::Bytes(b) => *b,
                Size::Text(t) => parse_size(t).map_err(ApiError::bad_request)?,
            };
            Ok(DiskSpec::File {
                path: PathBuf::from(format!("disks/disk-{disks:02}.img")),
                capacity_bytes,
            })
        }
        _ => Err(ApiError::bad_request(
            "give either \"device\" (a block device) or \"size\" (a file-backed disk)",
        )),
    }
}

/// The engine's refusals are the operator's to fix: 400 with its message.
fn api_error(e: permafrost_engine::Error) -> ApiError {
    use permafrost_engine::Error as E;
    match e {
        E::Header { .. } | E::Config(_) | E::InvalidArgument(_) | E::Disk(_) => {
            ApiError::bad_request(format!("cannot add the disk: {e}"))
        }
        other => ApiError::internal(format!("cannot add the disk: {other}")),
    }
}

pub(crate) async fn add_disk(admin: Admin, request: ApiRequest) -> ApiResult {
    let body: NewDisk = request.json()?;
    let store = admin.store().clone();
    let (report, other_spin_ups) = blocking(move || {
        let engine = store.engine();
        let spec = spec_of(&body, engine.geometry().disks())?;
        let before = engine.geometry().disks();
        let spin_ups = |n: usize| -> u64 { (0..n).map(|d| engine.power().stats(d).spin_ups).sum() };
        let spin_ups_before = spin_ups(before);
        let report = engine
            .add_disk_live(AddDisk {
                spec,
                hpg: body.row,
                column: body.column,
            })
            .map_err(api_error)?;
        Ok((report, spin_ups(before) - spin_ups_before))
    })
    .await?;
    admin.events().emit(
        "disk",
        format!(
            "disk {} added as bucket {} (row {}, column {}): the grid is now {}",
            report.disk, report.bucket, report.hpg, report.column, report.geometry
        ),
        serde_json::json!({ "disk": report.disk, "added": true, "bucket": report.bucket }),
    );
    let mut answer =
        serde_json::to_value(&report).map_err(|e| ApiError::internal(e.to_string()))?;
    answer["other_disks_spin_ups"] = other_spin_ups.into();
    json(&answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        assert_eq!(parse_size("1073741824"), Ok(1 << 30));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_size("4TB"), Ok(4_000_000_000_000));
        assert_eq!(parse_size("1.5gib"), Ok(3 << 29));
        assert!(parse_size("12 parsecs")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_size("GiB").unwrap_err().contains("expected a number"));
    }
}
