//! Making keys: names people choose, key ids and secrets the server draws.

use rand::Rng;

/// Longest key name.
pub const NAME_BYTES_MAX: usize = 64;
/// Length of a drawn key id (`PF` + 18 characters, as AWS key ids are 20).
const ACCESS_KEY_CHARS: usize = 20;
/// Length of a drawn secret (as AWS secrets).
const SECRET_KEY_CHARS: usize = 40;

/// Whether `name` may name a key: 1 to 64 of `A-Z a-z 0-9 . _ -`, not starting with `.` or `-`.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if name.is_empty() || name.len() > NAME_BYTES_MAX {
        return Err(format!(
            "key name {name:?}: 1 to {NAME_BYTES_MAX} characters, please"
        ));
    }
    if !ok_chars || name.starts_with(['.', '-']) {
        return Err(format!(
            "key name {name:?}: use letters, digits, '.', '_' and '-' (not first)"
        ));
    }
    Ok(())
}

/// A new key id: `PF` and 18 upper-case letters and digits.
pub fn new_access_key() -> String {
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut rng = rand::thread_rng();
    let mut id = String::from("PF");
    while id.len() < ACCESS_KEY_CHARS {
        id.push(CHARS[rng.gen_range(0..CHARS.len())] as char);
    }
    id
}

/// A new secret: 40 characters of letters, digits, `+` and `/` (about 238 bits).
pub fn new_secret_key() -> String {
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut rng = rand::thread_rng();
    (0..SECRET_KEY_CHARS)
        .map(|_| CHARS[rng.gen_range(0..CHARS.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name("robot-7").is_ok());
        assert!(check_name("correlator.jive_2").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("-x").is_err());
        assert!(check_name("a b").is_err());
        assert!(check_name(&"a".repeat(65)).is_err());
    }

    #[test]
    fn drawn_keys_have_their_shape_and_differ() {
        let (a, b) = (new_access_key(), new_access_key());
        assert_eq!(a.len(), 20);
        assert!(a.starts_with("PF"));
        assert_ne!(a, b);
        assert_eq!(new_secret_key().len(), 40);
        assert_ne!(new_secret_key(), new_secret_key());
    }
}
