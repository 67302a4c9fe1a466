//! RestoreObject: a copy of a version in the cache, pinned there for `Days` (lifecycle days). `202` when a
//! restore starts or a pending one is upgraded to a faster tier, `200` when the version was restored already
//! (its expiry moves), `409 RestoreAlreadyInProgress` while one runs at the same or a faster tier; HEAD then
//! shows `x-amz-restore`. The tier (`Tier`, or `GlacierJobParameters.Tier`; `Standard` when neither is given)
//! says when the restore thread reads it: Expedited at once, Standard batched per disk, Bulk at night or when
//! the disk spins anyway (docs/archive.md).

use std::sync::Arc;

use http::StatusCode;
use permafrost_store::{RestoreOutcome, RestoreTier, Store, StoreError};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use crate::bridge::blocking;
use crate::error::s3_error;

pub(crate) async fn restore_object(
    store: &Arc<Store>,
    req: S3Request<RestoreObjectInput>,
) -> S3Result<S3Response<RestoreObjectOutput>> {
    let input = req.input;
    let request = input.restore_request.unwrap_or_default();
    if request.type_.is_some()
        || request.select_parameters.is_some()
        || request.output_location.is_some()
    {
        return Err(s3_error(StoreError::InvalidArgument(
            "only plain restores (Days) are supported, not SELECT restores".into(),
        )));
    }
    let days = match request.days {
        None => 1,
        Some(d) if d > 0 => d as u32,
        Some(d) => {
            return Err(s3_error(StoreError::InvalidArgument(format!(
                "Days {d}: a restore keeps its copy at least 1 day"
            ))))
        }
    };
    let tier = tier_of(&request)?;
    let store = Arc::clone(store);
    let (bucket, key) = (input.bucket.clone(), input.key.clone());
    let outcome = blocking(move || {
        store.restore_object(&bucket, &key, input.version_id.as_deref(), days, tier)
    })
    .await?;
    match outcome {
        RestoreOutcome::Started | RestoreOutcome::Upgraded => {
            // s3s 0.14 answers every RestoreObject with 200 whatever `S3Response::status` says; the server
            // applies this header (and removes it).
            let mut response = S3Response::new(RestoreObjectOutput::default());
            response.headers.insert(
                crate::server::STATUS_OVERRIDE_HEADER,
                http::HeaderValue::from(StatusCode::ACCEPTED.as_u16()),
            );
            Ok(response)
        }
        RestoreOutcome::Extended => Ok(S3Response::new(RestoreObjectOutput::default())),
        RestoreOutcome::InProgress => Err(s3_error(StoreError::RestoreAlreadyInProgress(format!(
            "{}/{}: a restore of this version is already running",
            input.bucket, input.key
        )))),
    }
}

/// The request's tier: `Tier`, else `GlacierJobParameters.Tier`, else `Standard`; both given must agree.
pub(crate) fn tier_of(request: &RestoreRequest) -> S3Result<RestoreTier> {
    let parse = |t: &Tier| {
        t.as_str().parse::<RestoreTier>().map_err(|e| {
            s3_error(StoreError::InvalidArgument(format!(
                "{e}: the tiers are Expedited (at once), Standard (batched per disk) and Bulk (at night)"
            )))
        })
    };
    let direct = request.tier.as_ref().map(parse).transpose()?;
    let job = request
        .glacier_job_parameters
        .as_ref()
        .map(|p| parse(&p.tier))
        .transpose()?;
    match (direct, job) {
        (Some(a), Some(b)) if a != b => Err(s3_error(StoreError::InvalidArgument(format!(
            "Tier {a} and GlacierJobParameters Tier {b} differ: give one"
        )))),
        (Some(t), _) | (None, Some(t)) => Ok(t),
        (None, None) => Ok(RestoreTier::Standard),
    }
}
