//! GET and HEAD of an object held as cross-node XOR parity fragments (issue 13; `docs/cluster.md` "Cross-node
//! XOR parity"): the S3 presentation of `permafrost_cluster::parity`, which places, fetches and rebuilds the
//! fragments (an object of `n` bytes is held as `a`, `b` and `p = a ⊕ b` of `ceil(n / 2)` bytes on three nodes).
//!
//! - **Read** ([`get`], [`head`]): any node. Each half the request needs (`a`, `b`, or both;
//!   `permafrost_cluster::plan`) is fetched from its holder, or rebuilt as the XOR of the other two
//!   (`permafrost_cluster::fetch_fragment`). The half's BLAKE3 is compared with the directory's before the
//!   body's last bytes go out ([`Window`] holds the last piece back): a mismatch cuts the body (never a whole
//!   wrong answer). A range reads whole halves and skips what is outside it. A half with no way to be read
//!   (two of the three holders down) is `503` before the answer starts.
//! - HEAD is answered from the directory.

use std::io::{self, Write};
use std::sync::Arc;

use bytes::Bytes;
use permafrost_catalog::cluster::ParityObject;
use permafrost_cluster::{fetch_fragment, plan, ways, ClusterNode};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Response, S3Result};

use crate::cluster::{blocking, service_unavailable};

/// The inclusive byte range a request asks of an object of `n` bytes; `None` without a range. An unsatisfiable
/// range is `InvalidRange` (416).
fn resolve(range: Option<Range>, n: u64) -> S3Result<Option<(u64, u64)>> {
    let Some(range) = range else { return Ok(None) };
    let bad = || {
        let mut e = S3Error::with_message(
            S3ErrorCode::InvalidRange,
            format!("the range is not satisfiable for an object of {n} bytes"),
        );
        e.set_status_code(http::StatusCode::RANGE_NOT_SATISFIABLE);
        e
    };
    let (first, last) = match range {
        Range::Int { first, last } => (first, last.unwrap_or(u64::MAX).min(n.saturating_sub(1))),
        Range::Suffix { length } => (n.saturating_sub(length), n.saturating_sub(1)),
    };
    if n == 0 || first >= n || first > last {
        return Err(bad());
    }
    Ok(Some((first, last)))
}

/// The body's writer: keeps bytes `[skip, skip + take)` of what is written and sends them on, always holding the
/// last piece back until [`Window::release`] (so a failed check can still cut the body).
struct Window {
    skip: u64,
    take: u64,
    held: Option<Bytes>,
    tx: tokio::sync::mpsc::Sender<Result<Bytes, io::Error>>,
}

impl Window {
    fn push(&mut self, piece: Bytes) -> io::Result<()> {
        if let Some(prev) = self.held.replace(piece) {
            self.tx
                .blocking_send(Ok(prev))
                .map_err(|_| io::Error::other("the client went away"))?;
        }
        Ok(())
    }

    fn release(&mut self) {
        if let Some(last) = self.held.take() {
            let _ = self.tx.blocking_send(Ok(last));
        }
    }
}

impl Write for Window {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let len = buf.len() as u64;
        let skip = self.skip.min(len);
        self.skip -= skip;
        let take = (len - skip).min(self.take);
        self.take -= take;
        if take > 0 {
            self.push(Bytes::copy_from_slice(
                &buf[skip as usize..(skip + take) as usize],
            ))?;
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The object's metadata as `publish_parity` stored it.
fn meta_of(obj: &ParityObject) -> (Option<String>, Vec<(String, String)>) {
    let v: serde_json::Value = serde_json::from_str(&obj.meta).unwrap_or_default();
    let content_type = v
        .get("content_type")
        .and_then(|c| c.as_str())
        .map(str::to_owned)
        .or_else(|| obj.entry.content_type.clone())
        .or_else(|| Some(crate::common::DEFAULT_CONTENT_TYPE.to_owned()));
    let user = v
        .get("user_metadata")
        .and_then(|m| serde_json::from_value(m.clone()).ok())
        .unwrap_or_default();
    (content_type, user)
}

/// HEAD of an object held as fragments: from the directory.
pub(crate) fn head(obj: &ParityObject) -> HeadObjectOutput {
    let (content_type, user) = meta_of(obj);
    HeadObjectOutput {
        accept_ranges: Some("bytes".into()),
        content_length: i64::try_from(obj.entry.size_bytes).ok(),
        content_type,
        e_tag: Some(crate::common::etag(&obj.entry.etag)),
        last_modified: Some(crate::common::timestamp(obj.entry.last_modified_ms)),
        metadata: crate::common::metadata(&user),
        ..Default::default()
    }
}

/// GET of an object held as fragments (see the module doc).
pub(crate) async fn get(
    node: &Arc<ClusterNode>,
    obj: ParityObject,
    range: Option<Range>,
) -> S3Result<S3Response<GetObjectOutput>> {
    let n = obj.entry.size_bytes;
    let span = resolve(range, n)?;
    let (first, last) = span.unwrap_or((0, n.saturating_sub(1)));
    let length = if n == 0 { 0 } else { last - first + 1 };
    let relays: std::collections::BTreeMap<String, String> = {
        let db = Arc::clone(&node.db);
        blocking(move || db.relay_addresses())
            .await?
            .into_iter()
            .collect()
    };
    let steps = if n == 0 {
        Vec::new()
    } else {
        plan(n, first, last)
    };
    // Refuse at once when a half has no way to be read (two holders down).
    for (role, _, _) in &steps {
        ways(&obj, role, &relays).map_err(service_unavailable)?;
    }
    let (content_type, user) = meta_of(&obj);
    let output = GetObjectOutput {
        accept_ranges: Some("bytes".into()),
        content_length: i64::try_from(length).ok(),
        content_range: span.map(|(f, l)| format!("bytes {f}-{l}/{n}")),
        content_type,
        e_tag: Some(crate::common::etag(&obj.entry.etag)),
        last_modified: Some(crate::common::timestamp(obj.entry.last_modified_ms)),
        metadata: crate::common::metadata(&user),
        ..Default::default()
    };
    let (tx, rx) =
        tokio::sync::mpsc::channel::<Result<Bytes, io::Error>>(crate::BODY_PIECES_IN_FLIGHT);
    let me = Arc::clone(node);
    tokio::task::spawn_blocking(move || {
        let mut window = Window {
            skip: 0,
            take: 0,
            held: None,
            tx: tx.clone(),
        };
        for (role, skip, take) in steps {
            window.skip = skip;
            window.take = take;
            let want = obj
                .fragments
                .iter()
                .find(|f| f.role == role)
                .map(|f| f.blake3.clone())
                .unwrap_or_default();
            let outcome = fetch_fragment(&me, &obj, role, &relays, &mut window).and_then(|hash| {
                match blake3::Hash::from(hash).to_hex().as_str() == want {
                    true => Ok(()),
                    false => Err(format!(
                        "fragment {role}: BLAKE3 differs from the directory's"
                    )),
                }
            });
            if let Err(e) = outcome {
                tracing::error!(
                    "cluster: GET {}/{}: fragment {role} failed, body cut: {e}",
                    obj.entry.bucket,
                    obj.entry.key
                );
                let _ = tx.blocking_send(Err(io::Error::other(e)));
                return;
            }
        }
        window.release();
    });
    let body = StreamingBlob::wrap(Pieces { rx });
    Ok(S3Response::new(GetObjectOutput {
        body: Some(body),
        ..output
    }))
}

struct Pieces {
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, io::Error>>,
}

impl futures::Stream for Pieces {
    type Item = Result<Bytes, io::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn ranges_resolve_within_the_object(n in 0u64..100, first in 0u64..120, last in proptest::option::of(0u64..120), suffix in 0u64..120, use_suffix: bool) {
            let range = if use_suffix { Range::Suffix { length: suffix } } else { Range::Int { first, last } };
            match resolve(Some(range), n) {
                Ok(Some((f, l))) => prop_assert!(f <= l && l < n),
                Ok(None) => prop_assert!(false),
                Err(_) => prop_assert!(n == 0 || use_suffix && suffix == 0 || !use_suffix && (first >= n || last.is_some_and(|l| l < first))),
            }
        }
    }

    #[test]
    fn a_window_keeps_its_span_and_holds_the_last_piece() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let mut w = Window {
            skip: 3,
            take: 4,
            held: None,
            tx,
        };
        w.write_all(b"ab").unwrap();
        w.write_all(b"cdefgh").unwrap();
        w.write_all(b"ij").unwrap();
        assert!(rx.try_recv().is_err(), "the only piece is held back");
        w.release();
        assert_eq!(rx.try_recv().unwrap().unwrap(), Bytes::from_static(b"defg"));
    }
}
