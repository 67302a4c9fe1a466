//! The grid as `permafrost status` draws it from the admin API's state (`GET /_permafrost/api/v1/state`):
//! one cell per disk in its row and column, with its role and power state as a symbol and a word (readable
//! without colour), then the last spin-ups and their reasons, energy and tasks.

use std::fmt::Write as _;

use serde_json::Value;

use crate::units::format_bytes;

/// A power state's symbol and short word.
fn state_mark(state: &str) -> &'static str {
    match state {
        "off" => "o off",
        "spinning_up" => "^ spin",
        "idle" => "- idle",
        "active" => "> act",
        "failed" => "X FAIL",
        _ => "? ",
    }
}

fn role(d: &Value) -> String {
    let prefix = match d["role"].as_str() {
        Some("data") => "D",
        Some("hp") => "hP",
        Some("vp") => "vP",
        _ => "?",
    };
    format!("{prefix}{}", d["role_index"])
}

/// A number of the state (0 if absent).
fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// The text `permafrost status` adds for a server with the admin API.
pub(crate) fn render(state: &Value) -> String {
    let mut out = String::new();
    let columns = state["columns"].as_u64().unwrap_or(1).max(1) as usize;
    let disks = state["disks"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(
        out,
        "grid      {} columns x {} rows (o off, ^ spinning up, - idle, > active, X failed)",
        columns, state["rows"]
    );
    // Each disk at its position (`row`, `column`; by its number without them): a disk added to a grown grid is
    // drawn below its column.
    let mut rows: Vec<Vec<Option<&Value>>> = Vec::new();
    for (i, d) in disks.iter().enumerate() {
        let row = d["row"].as_u64().map_or(i / columns, |r| r as usize);
        let column = d["column"]
            .as_u64()
            .map_or(i % columns, |c| c as usize)
            .min(columns - 1);
        if rows.len() <= row {
            rows.resize(row + 1, vec![None; columns]);
        }
        rows[row][column] = Some(d);
    }
    for row in &rows {
        let mut line = String::from("         ");
        for d in row {
            let cell = match d {
                Some(d) => format!(
                    "{:>2} {:<4} {:<6}",
                    num(&d["disk"]),
                    role(d),
                    state_mark(d["shown_state"].as_str().unwrap_or(""))
                ),
                None => String::new(),
            };
            let _ = write!(line, " {cell:<15}");
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let energy = &state["energy"];
    let _ = writeln!(
        out,
        "power     {:.1} W now, {:.4} kWh since the grid was made; {} of at most {} disks spinning",
        energy["watts"].as_f64().unwrap_or(0.0),
        energy["kwh"].as_f64().unwrap_or(0.0),
        state["spinning_now"],
        state["spinning_max"]
    );
    let mut busiest: Vec<&Value> = disks
        .iter()
        .filter(|d| num(&d["spin_ups_last_day"]) > 0)
        .collect();
    busiest.sort_by_key(|d| std::cmp::Reverse(num(&d["spin_ups_last_day"])));
    let budget = match state["spin_ups_per_day_max"].as_u64() {
        Some(max) => format!("wear budget {max} a day"),
        None => "no wear budget".to_string(),
    };
    let listed: Vec<String> = busiest
        .iter()
        .take(8)
        .map(|d| {
            format!(
                "disk {} ({}) {}",
                num(&d["disk"]),
                role(d),
                num(&d["spin_ups_last_day"])
            )
        })
        .collect();
    let _ = writeln!(
        out,
        "spin-ups  in the last 24 hours: {} ({budget}, {} scheduler)",
        if listed.is_empty() {
            "none".to_string()
        } else {
            listed.join(", ")
        },
        state["scheduler"].as_str().unwrap_or("?")
    );
    let first_byte = &state["first_byte"];
    let quantiles = |q: &Value, what: &str| match q["count"].as_u64() {
        Some(n) if n > 0 => format!(
            "{what} {n}: first byte p50 {:.2} s, p99 {:.2} s",
            q["p50_seconds"].as_f64().unwrap_or(0.0),
            q["p99_seconds"].as_f64().unwrap_or(0.0)
        ),
        _ => format!("no {what}"),
    };
    let _ = writeln!(
        out,
        "reads     {}; {}",
        quantiles(&first_byte["reads"], "reads"),
        quantiles(
            &first_byte["reads_that_woke_a_disk"],
            "reads that woke a disk"
        )
    );
    let mut woke: Vec<&Value> = disks
        .iter()
        .filter(|d| d["last_wake"].is_object())
        .collect();
    woke.sort_by_key(|d| std::cmp::Reverse(d["last_wake"]["at_unix_ms"].as_u64().unwrap_or(0)));
    for d in woke.iter().take(5) {
        let w = &d["last_wake"];
        let _ = writeln!(
            out,
            "woke      disk {:>2} ({}) for {} ({} ms to spin up)",
            num(&d["disk"]),
            role(d),
            w["reason"].as_str().unwrap_or("?"),
            w["spin_up_ms"]
        );
    }
    for d in disks
        .iter()
        .filter(|d| d["defect_bytes"].as_u64().unwrap_or(0) > 0)
    {
        let _ = writeln!(
            out,
            "rebuild   disk {:>2}: {} left to recover",
            num(&d["disk"]),
            format_bytes(d["defect_bytes"].as_u64().unwrap_or(0))
        );
    }
    for t in state["tasks"].as_array().into_iter().flatten() {
        if matches!(t["state"].as_str(), Some("queued" | "running")) {
            let total = t["total_bytes"].as_u64().unwrap_or(0);
            let pct = if total > 0 {
                format!(
                    " {:.0}%",
                    100.0 * t["done_bytes"].as_f64().unwrap_or(0.0) / total as f64
                )
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "task      {} {} of {}:{} {}",
                t["id"],
                t["kind"].as_str().unwrap_or(""),
                t["subject"].as_str().unwrap_or(""),
                pct,
                t["state"].as_str().unwrap_or("")
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_added_to_a_grown_grid_is_drawn_below_its_column() {
        let disk = |n: u64, row: u64, column: u64, role: &str| {
            serde_json::json!({"disk": n, "row": row, "column": column, "role": role, "role_index": n,
                               "shown_state": "off", "defect_bytes": 0, "last_wake": null})
        };
        let state = serde_json::json!({
            "columns": 2, "rows": 3, "energy": {},
            "disks": [disk(0, 0, 0, "data"), disk(1, 0, 1, "hp"), disk(2, 1, 0, "vp"), disk(3, 1, 1, "vp"),
                      disk(4, 2, 1, "data")],
        });
        let text = render(&state);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[2].contains(" 2 vP2") && lines[2].contains(" 3 vP3"),
            "{text}"
        );
        let added = lines[3];
        assert!(added.contains(" 4 D4"), "{text}");
        assert!(
            added.find(" 4 D4").unwrap() >= lines[1].find(" 1 hP1").unwrap(),
            "the added disk sits in column 1: {text}"
        );
    }

    #[test]
    fn the_grid_is_drawn_row_by_row_with_roles_symbols_and_reasons() {
        let state = serde_json::json!({
            "columns": 2, "rows": 2, "spinning_now": 1, "spinning_max": 4,
            "spin_ups_per_day_max": 27, "scheduler": "deadline",
            "first_byte": {"reads": {"count": 10, "p50_seconds": 0.004, "p99_seconds": 10.2},
                           "reads_that_woke_a_disk": {"count": 2, "p50_seconds": 10.1, "p99_seconds": 10.2}},
            "energy": {"watts": 7.5, "kwh": 0.0001},
            "disks": [
                {"disk": 0, "role": "data", "role_index": 0, "shown_state": "active", "defect_bytes": 0,
                 "spin_ups_last_day": 3,
                 "last_wake": {"reason": "read of a/b", "spin_up_ms": 20, "at_unix_ms": 5}},
                {"disk": 1, "role": "hp", "role_index": 0, "shown_state": "off", "defect_bytes": 0, "last_wake": null,
                 "spin_ups_last_day": 5},
                {"disk": 2, "role": "vp", "role_index": 0, "shown_state": "failed", "defect_bytes": 4096, "last_wake": null},
                {"disk": 3, "role": "vp", "role_index": 1, "shown_state": "idle", "defect_bytes": 0, "last_wake": null}
            ],
            "tasks": [{"id": 3, "kind": "rebuild", "subject": "disk 2", "state": "running", "done_bytes": 1, "total_bytes": 4}]
        });
        let text = render(&state);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[1].contains(" 0 D0   > act") && lines[1].contains(" 1 hP0  o off"),
            "{text}"
        );
        assert!(
            lines[2].contains(" 2 vP0  X FAIL") && lines[2].contains(" 3 vP1  - idle"),
            "{text}"
        );
        assert!(
            text.contains("woke      disk  0 (D0) for read of a/b (20 ms to spin up)"),
            "{text}"
        );
        assert!(
            text.contains("spin-ups  in the last 24 hours: disk 1 (hP0) 5, disk 0 (D0) 3 (wear budget 27 a day, deadline scheduler)"),
            "{text}"
        );
        assert!(
            text.contains("reads     reads 10: first byte p50 0.00 s, p99 10.20 s; reads that woke a disk 2: first byte p50 10.10 s, p99 10.20 s"),
            "{text}"
        );
        assert!(
            text.contains("rebuild   disk  2: 4.00 KiB left to recover"),
            "{text}"
        );
        assert!(
            text.contains("task      3 rebuild of disk 2: 25% running"),
            "{text}"
        );
    }
}
