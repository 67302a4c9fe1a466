//! `aws-chunked` request bodies (streaming uploads, with and without trailers) as s3s decodes them for
//! PutObject. The target signs each request's headers with SigV4 (so the body reaches the chunk decoder) and
//! sends either fuzzed body bytes (any framing, any chunk signatures) or a well-formed unsigned-chunk body
//! built from fuzzed chunks and trailer value: then the object's body is exactly the chunks' bytes. Never a
//! panic; a body of any framing ends (bounded work).
#![no_main]
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use arbitrary::Arbitrary;
use futures::StreamExt;
use hmac::{Hmac, Mac};
use libfuzzer_sys::fuzz_target;
use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::SimpleAuth;
use s3s::dto::{PutObjectInput, PutObjectOutput};
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::{S3Request, S3Response, S3Result, S3};
use sha2::{Digest, Sha256};

const ACCESS_KEY: &str = "AKIAFUZZ";
const SECRET_KEY: &str = "fuzz-secret-key";
const BODY_READ_MAX: usize = 4 << 20;

/// What the last PutObject read: its body (`None`: the stream failed) and trailing headers.
static RECEIVED: Mutex<Option<Option<Vec<u8>>>> = Mutex::new(None);

struct Sink;

#[async_trait::async_trait]
impl S3 for Sink {
    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let mut got = Some(Vec::new());
        if let Some(mut body) = req.input.body {
            while let Some(piece) = body.next().await {
                match (piece, got.as_mut()) {
                    (Ok(b), Some(buf)) if buf.len() + b.len() <= BODY_READ_MAX => {
                        buf.extend_from_slice(&b)
                    }
                    _ => {
                        got = None;
                        break;
                    }
                }
            }
        }
        if let Some(t) = &req.trailing_headers {
            let _ = t.take();
        }
        *RECEIVED.lock().unwrap() = Some(got);
        Ok(S3Response::new(PutObjectOutput::default()))
    }
}

struct Anyone;

#[async_trait::async_trait]
impl S3Access for Anyone {
    async fn check(&self, _cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        Ok(())
    }
}

fn service() -> &'static (tokio::runtime::Runtime, S3Service) {
    static SERVICE: OnceLock<(tokio::runtime::Runtime, S3Service)> = OnceLock::new();
    SERVICE.get_or_init(|| {
        let mut b = S3ServiceBuilder::new(Sink);
        b.set_auth(SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
        b.set_access(Anyone);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        (rt, b.build())
    })
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).unwrap();
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `YYYYMMDDTHHMMSSZ` of now (UTC).
fn amz_date() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[derive(Debug, Arbitrary)]
enum Body {
    /// Any bytes under any streaming mode.
    Raw {
        mode: u8,
        decoded_len: u32,
        trailer: bool,
        bytes: Vec<u8>,
    },
    /// Well-formed unsigned chunks, then a trailer.
    Chunks {
        chunks: Vec<Vec<u8>>,
        trailer_value: String,
        lower_hex: bool,
    },
}

const MODES: [&str; 4] = [
    "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
    "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
    "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
    "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD",
];

fuzz_target!(|input: Body| {
    let (mode, decoded_len, trailer, body, expected) = match input {
        Body::Raw {
            mode,
            decoded_len,
            trailer,
            bytes,
        } => (
            MODES[usize::from(mode) % MODES.len()],
            u64::from(decoded_len) % (BODY_READ_MAX as u64),
            trailer,
            bytes,
            None,
        ),
        Body::Chunks {
            chunks,
            trailer_value,
            lower_hex,
        } => {
            let mut body = Vec::new();
            let mut data = Vec::new();
            for c in chunks.iter().filter(|c| !c.is_empty()).take(16) {
                let size = if lower_hex {
                    format!("{:x}", c.len())
                } else {
                    format!("{:X}", c.len())
                };
                body.extend_from_slice(size.as_bytes());
                body.extend_from_slice(b"\r\n");
                body.extend_from_slice(c);
                body.extend_from_slice(b"\r\n");
                data.extend_from_slice(c);
            }
            let value: String = trailer_value
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '+' || *c == '/')
                .take(40)
                .collect();
            body.extend_from_slice(format!("0\r\nx-amz-checksum-crc32:{value}\r\n\r\n").as_bytes());
            (MODES[0], data.len() as u64, true, body, Some(data))
        }
    };
    let date = amz_date();
    let day = &date[..8];
    let mut headers: Vec<(&str, String)> = vec![
        ("host", "localhost".into()),
        ("x-amz-content-sha256", mode.into()),
        ("x-amz-date", date.clone()),
        ("x-amz-decoded-content-length", decoded_len.to_string()),
    ];
    if trailer {
        headers.push(("x-amz-trailer", "x-amz-checksum-crc32".into()));
    }
    headers.sort();
    let signed: Vec<&str> = headers.iter().map(|(n, _)| *n).collect();
    let signed = signed.join(";");
    let canonical_headers: String = headers.iter().map(|(n, v)| format!("{n}:{v}\n")).collect();
    let canonical = format!("PUT\n/bucket/key\n\n{canonical_headers}\n{signed}\n{mode}");
    let scope = format!("{day}/us-east-1/s3/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let mut key = hmac(format!("AWS4{SECRET_KEY}").as_bytes(), day.as_bytes());
    for part in ["us-east-1", "s3", "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    let signature = hex(&hmac(&key, to_sign.as_bytes()));
    let mut builder = http::Request::builder().method("PUT").uri("/bucket/key");
    for (n, v) in &headers {
        builder = builder.header(*n, v);
    }
    let request = builder
        .header("content-encoding", "aws-chunked")
        .header("content-length", body.len().to_string())
        .header(
            "authorization",
            format!("AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/{scope}, SignedHeaders={signed}, Signature={signature}"),
        )
        .body(s3s::Body::from(body))
        .unwrap();
    *RECEIVED.lock().unwrap() = None;
    let (rt, service) = service();
    let response = rt.block_on(service.call(request));
    let received = RECEIVED.lock().unwrap().take();
    if let Some(data) = expected {
        let status = response.as_ref().map(|r| r.status().as_u16());
        let got = received
            .unwrap_or_else(|| panic!("a well-formed chunked upload was refused: {status:?}"));
        let got = got.expect("a well-formed chunked body decodes");
        assert!(
            got == data,
            "decoded {} bytes, sent {}",
            got.len(),
            data.len()
        );
    }
});
