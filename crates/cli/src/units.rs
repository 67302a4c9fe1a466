//! Byte sizes on the command line: `4096`, `64KiB`, `1.5GiB`, `4TB`.

/// Parse a byte size. Binary suffixes (KiB, MiB, GiB, TiB, or K/M/G/T) are powers of 1024;
/// decimal ones (kB, MB, GB, TB) are powers of 1000.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size (try 4096, 64MiB, 4TB)"))?;
    let factor: f64 = match suffix.trim() {
        "" | "B" => 1.0,
        "K" | "KiB" | "k" => 1024.0,
        "M" | "MiB" => 1024f64.powi(2),
        "G" | "GiB" => 1024f64.powi(3),
        "T" | "TiB" => 1024f64.powi(4),
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        other => {
            return Err(format!(
                "unknown size unit '{other}' in '{text}' (use KiB, MiB, GiB, TiB, kB, MB, GB, TB)"
            ))
        }
    };
    let bytes = number * factor;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("size '{text}' is out of range"));
    }
    Ok(bytes.round() as u64)
}

/// Format bytes for people: `1.50 GiB`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_bytes("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_bytes("4TB").unwrap(), 4_000_000_000_000);
        assert!(parse_bytes("12 parsecs").unwrap_err().contains("parsecs"));
        assert!(parse_bytes("lots").is_err());
    }

    #[test]
    fn sizes_format_for_people() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(3 << 29), "1.50 GiB");
    }
}
