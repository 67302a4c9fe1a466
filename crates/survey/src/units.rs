//! Byte quantities: parsing `1MiB`-style arguments and printing sizes for people.

/// Parses a byte quantity such as `4096`, `64KiB`, `1MiB`, `2GiB`, `10MB` or `1.5GiB`.
///
/// Binary units (`K`, `KiB`, `M`, `MiB`, `G`, `GiB`, `T`, `TiB`) are powers of 1024; decimal units
/// (`KB`, `MB`, `GB`, `TB`) are powers of 1000. Case-insensitive; spaces between number and unit
/// are allowed.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let value: f64 = number.parse().map_err(|_| {
        format!("`{text}` is not a byte quantity (expected e.g. 4096, 64KiB, 1MiB)")
    })?;
    let multiplier: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024.0f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => {
            return Err(format!(
                "`{text}`: unknown byte unit `{other}` (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            ))
        }
    };
    let bytes = value * multiplier;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("`{text}` is out of range"));
    }
    Ok(bytes.round() as u64)
}

/// Formats a byte count with binary units, three significant digits: `0 B`, `512 B`, `1.50 KiB`, `64.0 MiB`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value >= 100.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else if value >= 10.0 {
        format!("{value:.1} {}", UNITS[unit])
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

/// Formats a power-of-two boundary compactly: `0`, `1`, `512`, `1K`, `64K`, `1M`, `4G`.
pub fn format_boundary(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["", "K", "M", "G", "T", "P", "E"];
    let mut value = bytes;
    let mut unit = 0;
    while value >= 1024 && value.is_multiple_of(1024) && unit + 1 < UNITS.len() {
        value /= 1024;
        unit += 1;
    }
    format!("{value}{}", UNITS[unit])
}

/// Formats a fraction as a percentage with precision suited to its size: `62 %`, `0.31 %`, `<0.01 %`.
pub fn format_percent(fraction: f64) -> String {
    let percent = fraction * 100.0;
    if percent == 0.0 {
        "0 %".to_string()
    } else if percent.abs() >= 10.0 {
        format!("{percent:.0} %")
    } else if percent.abs() >= 1.0 {
        format!("{percent:.1} %")
    } else if percent.abs() >= 0.01 {
        format!("{percent:.2} %")
    } else {
        "<0.01 %".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_bytes_understands_binary_and_decimal_units() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("64KiB"), Ok(65536));
        assert_eq!(parse_bytes("1 MiB"), Ok(1 << 20));
        assert_eq!(parse_bytes("1m"), Ok(1 << 20));
        assert_eq!(parse_bytes("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_bytes("10MB"), Ok(10_000_000));
    }

    #[test]
    fn parse_bytes_rejects_garbage_with_a_message_naming_it() {
        let error = parse_bytes("12 parsecs").unwrap_err();
        assert!(error.contains("parsecs"), "{error}");
        assert!(parse_bytes("MiB").is_err());
        assert!(parse_bytes("").is_err());
    }

    #[test]
    fn format_helpers_are_compact() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(64 << 20), "64.0 MiB");
        assert_eq!(format_boundary(0), "0");
        assert_eq!(format_boundary(512), "512");
        assert_eq!(format_boundary(65536), "64K");
        assert_eq!(format_boundary(1 << 30), "1G");
        assert_eq!(format_percent(0.62), "62 %");
        assert_eq!(format_percent(0.003), "0.30 %");
    }
}
