//! The data directory of an archive and the files the binary keeps in it besides the store's own:
//!
//! - `DATA/.lock` ([`LOCK_FILE`]): whoever has the archive open (`permafrost serve`, a local command) holds an
//!   exclusive `flock` on it ([`lock`]);
//! - `DATA/endpoint` ([`ENDPOINT_FILE`]): where a running server answers, written when it listens and removed
//!   when it stops ([`write_endpoint`], [`running_server_endpoint`]);
//! - `DATA/credentials` ([`CREDENTIALS_FILE`], mode 0600): the root credentials a server generates on first
//!   start ([`server_credentials`]) and clients on the same machine read ([`credentials_in_file`]);
//! - `DATA/permafrost.toml`: the configuration, read by [`crate::config`].
//!
//! Files are replaced with [`write_durable`]: a crash leaves the old file or the new one whole.

use std::io::Write as _;
use std::path::Path;

use anyhow::{bail, Context, Result};
use permafrost_s3::Credentials;
use rand::distributions::Alphanumeric;
use rand::Rng;

/// Lock file of a data directory: whoever has the archive open holds an exclusive `flock` on it.
pub const LOCK_FILE: &str = ".lock";
/// File in the data directory where a running `permafrost serve` keeps its endpoint (removed when it stops).
pub const ENDPOINT_FILE: &str = "endpoint";
/// The root credentials of the server of a data directory (generated on first start, mode 0600).
pub const CREDENTIALS_FILE: &str = "credentials";

/// Create the data directory if it is missing; a new one is made private (mode 0700): the catalog holds every
/// access key's secret in clear (docs/security.md), so the directory is the service user's alone.
pub fn create(data_dir: &Path) -> Result<()> {
    let new = !data_dir.exists();
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create {}", data_dir.display()))?;
    if new {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(data_dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot make {} private (mode 0700)", data_dir.display()))?;
    }
    Ok(())
}

/// Take the data directory's exclusive lock (`flock` on `DATA/.lock`, held until the file is dropped), or fail
/// naming the server that holds it. `permafrost serve` takes the same lock for as long as it runs.
pub fn lock(data_dir: &Path) -> Result<std::fs::File> {
    if !data_dir.is_dir() {
        bail!(
            "no archive at {}: start `permafrost serve --data-dir {}` once to create one, or pass --endpoint URL to reach a running server",
            data_dir.display(),
            data_dir.display()
        );
    }
    let path = data_dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open the lock file {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => bail!(
            "a server is running on {} (or another permafrost command has it open: {} is locked); use --endpoint http://127.0.0.1:9000 (or the server's address), or stop the server",
            data_dir.display(),
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => Err(e).with_context(|| format!("cannot lock {}", path.display())),
    }
}

/// Whether the data directory's lock cannot be taken now: a server or another command holds it (or there is no
/// data directory).
pub fn is_locked(data_dir: &Path) -> bool {
    lock(data_dir).is_err()
}

/// Record where the server running on `data_dir` answers (`http://ADDRESS`).
pub fn write_endpoint(data_dir: &Path, address: std::net::SocketAddr) -> Result<()> {
    write_durable(
        &data_dir.join(ENDPOINT_FILE),
        &format!("http://{address}\n"),
    )
}

/// Forget the endpoint of a server that stops (nothing when there is none).
pub fn remove_endpoint(data_dir: &Path) {
    let _ = std::fs::remove_file(data_dir.join(ENDPOINT_FILE));
}

/// The endpoint a server running on `data_dir` wrote, if any.
pub fn running_server_endpoint(data_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(data_dir.join(ENDPOINT_FILE)).ok()?;
    let endpoint = text.trim();
    (!endpoint.is_empty()).then(|| endpoint.to_string())
}

/// The root credentials of the server of `data_dir` and where they came from: `DATA/credentials` when it
/// exists (it must hold `access_key = "…"` and `secret_key = "…"`), else new ones generated into it (mode 0600).
/// The secret never goes to the description (it often ends up in a log file).
pub fn server_credentials(data_dir: &Path) -> Result<(Credentials, String)> {
    let path = data_dir.join(CREDENTIALS_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let (mut key, mut secret) = (None, None);
            for line in text.lines() {
                let Some((name, value)) = line.split_once('=') else {
                    continue;
                };
                let value = value.trim().trim_matches('"').to_string();
                match name.trim() {
                    "access_key" => key = Some(value),
                    "secret_key" => secret = Some(value),
                    _ => {}
                }
            }
            match (key, secret) {
                (Some(access_key), Some(secret_key)) => Ok((
                    Credentials {
                        access_key,
                        secret_key,
                    },
                    format!("secret key in {}", path.display()),
                )),
                _ => bail!(
                    "{} must hold access_key = \"…\" and secret_key = \"…\"",
                    path.display()
                ),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let credentials = Credentials {
                access_key: format!("PF{}", random_token(18).to_uppercase()),
                secret_key: random_token(40),
            };
            write_private(
                &path,
                &format!(
                    "# Root credentials of this permafrost server (S3 access key id and secret access key).\n\
                     access_key = \"{}\"\nsecret_key = \"{}\"\n",
                    credentials.access_key, credentials.secret_key
                ),
            )?;
            Ok((
                credentials,
                format!(
                    "generated; the secret key is in {} (mode 0600)",
                    path.display()
                ),
            ))
        }
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// `(access key, secret key)` of `DATA/credentials` for a client on the server's machine: each `None` when the
/// file or the line is missing.
pub fn credentials_in_file(data_dir: &Path) -> (Option<String>, Option<String>) {
    match std::fs::read_to_string(data_dir.join(CREDENTIALS_FILE)) {
        Ok(text) => parse_credentials(&text),
        Err(_) => (None, None),
    }
}

/// `(access key, secret key)` from a credentials file: lines `NAME = VALUE` or `NAME=VALUE` (TOML or shell
/// style, quotes optional); names as the server and the AWS tools spell them.
fn parse_credentials(text: &str) -> (Option<String>, Option<String>) {
    const KEYS: [&str; 5] = [
        "access_key",
        "access_key_id",
        "aws_access_key_id",
        "root_user",
        "permafrost_root_user",
    ];
    const SECRETS: [&str; 5] = [
        "secret_key",
        "secret_access_key",
        "aws_secret_access_key",
        "root_password",
        "permafrost_root_password",
    ];
    let (mut key, mut secret) = (None, None);
    for line in text.lines() {
        let line = line.trim().trim_start_matches("export ");
        let Some((name, value)) = line.split_once('=').or_else(|| line.split_once(':')) else {
            continue;
        };
        let name = name.trim().to_ascii_lowercase();
        let value = value
            .trim()
            .trim_matches(|c| c == '"' || c == '\'')
            .to_string();
        if value.is_empty() {
            continue;
        }
        if KEYS.contains(&name.as_str()) {
            key = Some(value);
        } else if SECRETS.contains(&name.as_str()) {
            secret = Some(value);
        }
    }
    (key, secret)
}

fn random_token(len: usize) -> String {
    rand::thread_rng()
        .sample_iter(&Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

/// Create `path` with mode 0600 and `text`, durably (the file synced, then its directory); an existing file is
/// an error, never overwritten.
fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        permafrost_disk::durable::sync_dir(dir)?;
    }
    Ok(())
}

/// Write `text` to `path` so that a crash leaves the old file or the new one whole
/// ([`permafrost_disk::durable::write_durable`]: a temporary `NAME.tmp`, synced, renamed, the directory synced).
pub fn write_durable(path: &Path, text: &str) -> Result<()> {
    Ok(permafrost_disk::durable::write_durable(
        path,
        text.as_bytes(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_files_parse_in_toml_and_shell_style() {
        let (k, s) = parse_credentials("# generated\naccess_key = \"AK1\"\nsecret_key = \"SK1\"\n");
        assert_eq!((k.as_deref(), s.as_deref()), (Some("AK1"), Some("SK1")));
        let (k, s) =
            parse_credentials("export PERMAFROST_ROOT_USER=u\nPERMAFROST_ROOT_PASSWORD='p w'\n");
        assert_eq!((k.as_deref(), s.as_deref()), (Some("u"), Some("p w")));
        assert_eq!(parse_credentials("nothing here"), (None, None));
    }

    #[test]
    fn generated_credentials_are_private_and_read_back_by_server_and_client() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (made, source) = server_credentials(dir.path()).unwrap();
        assert!(source.starts_with("generated"), "{source}");
        assert!(!source.contains(&made.secret_key), "{source}");
        let path = dir.path().join(CREDENTIALS_FILE);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (read, source) = server_credentials(dir.path()).unwrap();
        assert_eq!(
            (read.access_key.as_str(), read.secret_key.as_str()),
            (made.access_key.as_str(), made.secret_key.as_str())
        );
        assert!(source.starts_with("secret key in"), "{source}");
        assert_eq!(
            credentials_in_file(dir.path()),
            (Some(made.access_key), Some(made.secret_key))
        );
    }

    #[test]
    fn a_credentials_file_without_both_keys_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CREDENTIALS_FILE), "access_key = \"A\"\n").unwrap();
        let e = server_credentials(dir.path()).unwrap_err().to_string();
        assert!(e.contains("credentials must hold access_key"), "{e}");
    }

    #[test]
    fn the_lock_is_exclusive_and_the_endpoint_file_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(running_server_endpoint(dir.path()), None);
        let held = lock(dir.path()).unwrap();
        assert!(is_locked(dir.path()));
        let e = lock(dir.path()).unwrap_err().to_string();
        assert!(e.contains("is locked"), "{e}");
        write_endpoint(dir.path(), "127.0.0.1:9123".parse().unwrap()).unwrap();
        assert_eq!(
            running_server_endpoint(dir.path()).as_deref(),
            Some("http://127.0.0.1:9123")
        );
        remove_endpoint(dir.path());
        assert_eq!(running_server_endpoint(dir.path()), None);
        drop(held);
        assert!(!is_locked(dir.path()));
        let e = lock(&dir.path().join("none")).unwrap_err().to_string();
        assert!(e.contains("no archive at"), "{e}");
    }
}
