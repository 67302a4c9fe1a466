//! Growing objects: an object that is visible while it is still being written, sized to its durable prefix
//! (docs/store.md, "Part-list contents"). The recorder (`crates/record`) writes each scan as one.
//!
//! A growing object is a multipart upload whose parts (*pieces*) go through the ordinary put pipeline (hashed,
//! fsynced and committed as contents, persisted while the upload is open) plus a part-list content, named once
//! from the upload id ([`growing_list_id`]), that an object at the key names from the start. Each *durable
//! point* is one catalog transaction ([`GrowingObject::append`] → `Catalog::append_growing`) adding the next
//! sealed piece to the list and raising the object's size, ETag and metadata; readers (`ObjectReader`, S3 GET
//! with ranges) see the pieces present when they open, a few seconds behind the writer. [`GrowingObject::finish`]
//! completes the upload with the list's pieces in one transaction (`Catalog::complete_upload`): the object
//! becomes an ordinary, immutable part-list object (id = the hash of its parts, ETag `"md5-of-md5s-N"`) and the
//! growing list is collected like any unreferenced content.
//!
//! **Invariants.**
//! - What a durable point committed survives a crash: its pieces are fsynced contents and its catalog rows
//!   committed before [`GrowingObject::append`] returns. After a crash [`Store::growing_objects`] finds every
//!   growing object again with exactly the pieces committed to its list; a piece sealed but not yet appended is
//!   only an upload part and is released when the object is finished.
//! - The object's size, ETag and user metadata always describe the same durable prefix (one transaction).
//! - Pieces are appended in the order they were begun ([`GrowingObject::piece`] numbers them); sealing
//!   ([`Piece::seal`], the fsync) may run on another thread than writing.

use std::sync::Arc;

use md5::Digest as _;
use parking_lot::Mutex;
use permafrost_catalog::{
    Compression, ContentId, ContentOwner, ContentPart, ContentRecord, Encoding, GrowingAppend,
    NewPartList, ObjectRecord, StoredForm,
};

use crate::multipart::part_list_id;
use crate::put::{PutHandle, PutOptions, Target};
use crate::store::{hex, validate_key, Inner, Store};
use crate::{ObjectInfo, Result, StoreError};

/// Key of BLAKE3's derive-key mode for [`growing_list_id`].
const GROWING_LIST_CONTEXT: &str = "permafrost 2026-11 growing object list v1";

/// The id of the part-list content of the growing object started as upload `upload_id`: BLAKE3 in derive-key
/// mode over the upload id, so that it never collides with a content's plain BLAKE3 or a completed list's id.
pub fn growing_list_id(upload_id: &str) -> ContentId {
    ContentId {
        hash: blake3::derive_key(GROWING_LIST_CONTEXT, upload_id.as_bytes()),
        encoding: Encoding::Identity,
    }
}

/// Whether `content` is the list of a growing object still growing: a part list whose id is not the hash of its
/// parts, named by the current version of its key, whose upload is still open. Such a list is never placed or
/// persisted (its manifest would name a prefix of the final object); its pieces are, as they arrive.
///
/// A growing list no longer named by its key's current version is *frozen*: no piece is ever appended to it
/// again (`Catalog::append_growing` appends only to the current version's list). Finishing a growing object in
/// a versioned bucket leaves one so (the growing version becomes noncurrent, the finished one is new), and so
/// does a PUT over a growing object there. A frozen list is persisted like any part list: its version's bytes
/// must reach the grid too.
pub(crate) fn is_growing(inner: &Inner, content: &ContentRecord) -> Result<bool> {
    if content.stored_form != StoredForm::Parts {
        return Ok(false);
    }
    let parts: Vec<ContentPart> = inner
        .catalog
        .content_parts(&content.id)?
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    if part_list_id(&parts, content.id.encoding) == content.id {
        return Ok(false);
    }
    let Some(ContentOwner::Object(owner)) = inner.catalog.owner_of(&content.id)? else {
        return Ok(false);
    };
    let current = inner.catalog.get_object(&owner.bucket, &owner.key)?;
    if current.is_none_or(|(object, _)| object.content != content.id) {
        return Ok(false);
    }
    Ok(inner
        .catalog
        .list_uploads(&owner.bucket, &owner.key, UPLOADS_OF_KEY_MAX)?
        .iter()
        .any(|u| u.key == owner.key && growing_list_id(&u.upload_id) == content.id))
}

/// Uploads of one key looked at to find a growing object's own.
const UPLOADS_OF_KEY_MAX: usize = 10_000;

/// Options of [`Store::begin_growing`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrowingOptions {
    /// The object's first user metadata (`x-amz-meta-*`, names without the prefix).
    pub user_metadata: Vec<(String, String)>,
    pub content_type: Option<String>,
    /// How pieces are stored; `None` = the bucket's compression.
    pub compression: Option<Compression>,
}

struct State {
    /// Pieces in the list (durable points so far).
    parts: u32,
    /// Pieces begun ([`GrowingObject::piece`]); the next gets number `begun + 1`.
    begun: u32,
    /// Logical bytes of the list.
    len_bytes: u64,
    /// MD5 of the pieces' MD5s so far (the multipart ETag's digest).
    md5_of_md5s: md5::Md5,
    user_metadata: Vec<(String, String)>,
    finished: bool,
}

/// A growing object (see the module doc). Cheap to clone: clones share one state, so one thread can write
/// pieces while another seals and appends them.
#[derive(Clone)]
pub struct GrowingObject {
    inner: Arc<Inner>,
    upload_id: String,
    bucket: String,
    key: String,
    dataset: String,
    list: ContentId,
    compression: Compression,
    content_type: Option<String>,
    state: Arc<Mutex<State>>,
}

/// A piece being written: write its bytes, then [`Piece::seal`] it and [`GrowingObject::append`] it.
pub struct Piece {
    number: u32,
    handle: PutHandle,
}

/// A piece whose bytes and catalog row are durable, not yet part of the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedPiece {
    number: u32,
    md5: [u8; 16],
    len_bytes: u64,
}

impl Piece {
    /// Its number in the upload (1, 2, …; the order of appends).
    pub fn number(&self) -> u32 {
        self.number
    }

    /// Bytes written so far.
    pub fn len_bytes(&self) -> u64 {
        self.handle.received_bytes()
    }

    /// Append bytes (hashed, stored in the cache; waits for cache space like any put, up to
    /// `cache_wait_ms_max`, then `SlowDown`).
    pub fn write(&mut self, data: &[u8]) -> Result<()> {
        self.handle.write(data)
    }

    /// Make the piece durable: fsync and rename its cache file and commit it as a part of the upload.
    pub fn seal(self) -> Result<SealedPiece> {
        let len_bytes = self.handle.received_bytes();
        let info = self.handle.finish()?;
        let md5 = md5_of_etag(&info.etag)?;
        Ok(SealedPiece {
            number: self.number,
            md5,
            len_bytes,
        })
    }

    /// Abandon the piece (its bytes are deleted). Its number is begun again by the next [`GrowingObject::piece`]
    /// only if no later piece was begun; otherwise the object cannot take more pieces.
    pub fn abort(self) {
        self.handle.abort();
    }
}

impl SealedPiece {
    pub fn number(&self) -> u32 {
        self.number
    }
    pub fn len_bytes(&self) -> u64 {
        self.len_bytes
    }
}

fn md5_of_etag(etag: &str) -> Result<[u8; 16]> {
    let text = etag.trim_matches('"');
    let mut md5 = [0u8; 16];
    if text.len() != 32 {
        return Err(StoreError::Internal(format!(
            "a piece's ETag {etag} is not an MD5"
        )));
    }
    for (i, byte) in md5.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16)
            .map_err(|_| StoreError::Internal(format!("a piece's ETag {etag} is not an MD5")))?;
    }
    Ok(md5)
}

fn etag(md5_of_md5s: &md5::Md5, parts: u32) -> String {
    let digest: [u8; 16] = md5_of_md5s.clone().finalize().into();
    if parts == 0 {
        format!("\"{}\"", hex(&digest))
    } else {
        format!("\"{}-{parts}\"", hex(&digest))
    }
}

impl Store {
    /// Start a growing object at `bucket/key`: an empty object is visible at once and grows with each
    /// [`GrowingObject::append`]. Refused with `InvalidArgument` when an object exists at the key.
    pub fn begin_growing(
        &self,
        bucket: &str,
        key: &str,
        options: GrowingOptions,
    ) -> Result<GrowingObject> {
        validate_key(key)?;
        self.head_bucket(bucket)?;
        let exists = || {
            StoreError::InvalidArgument(format!(
                "{bucket}/{key} exists already; a growing object needs a new key"
            ))
        };
        if self.inner().catalog.get_object(bucket, key)?.is_some() {
            return Err(exists());
        }
        let put_options = PutOptions {
            user_metadata: options.user_metadata.clone(),
            content_type: options.content_type.clone(),
            ..PutOptions::default()
        };
        let upload_id = self.create_multipart(bucket, key, put_options)?;
        let list = growing_list_id(&upload_id);
        let inner = self.inner();
        let now = permafrost_catalog::now_ms();
        let dataset = inner.dataset_of(bucket, key);
        let md5_of_md5s = md5::Md5::new();
        let object = ObjectRecord {
            bucket: bucket.to_string(),
            key: key.to_string(),
            content: list,
            size_bytes: 0,
            etag: etag(&md5_of_md5s, 0),
            last_modified_ms: now,
            content_type: options.content_type.clone(),
            user_metadata: options.user_metadata.clone(),
            checksums: Vec::new(),
            dataset: dataset.clone(),
            version_id: String::new(),
            attributes: Default::default(),
            expires_ms: None,
        };
        let started = inner.catalog.begin_growing(&object, now);
        if !matches!(started, Ok(true)) {
            let _ = self.abort_multipart(&upload_id);
            started?;
            return Err(exists());
        }
        let compression = match options.compression {
            Some(c) => c,
            None => self.bucket_settings(bucket)?.effective.compression,
        };
        Ok(GrowingObject {
            inner: Arc::clone(inner),
            upload_id,
            bucket: bucket.to_string(),
            key: key.to_string(),
            dataset,
            list,
            compression,
            content_type: options.content_type,
            state: Arc::new(Mutex::new(State {
                parts: 0,
                begun: 0,
                len_bytes: 0,
                md5_of_md5s,
                user_metadata: options.user_metadata,
                finished: false,
            })),
        })
    }

    /// The growing objects in the catalog (left by a run that stopped before finishing them), each with the
    /// pieces its last durable point committed.
    pub fn growing_objects(&self) -> Result<Vec<GrowingObject>> {
        let inner = self.inner();
        let mut out = Vec::new();
        for upload in inner.catalog.all_uploads()? {
            let list = growing_list_id(&upload.upload_id);
            let Some((object, _)) = inner.catalog.get_object(&upload.bucket, &upload.key)? else {
                continue;
            };
            if object.content != list {
                continue;
            }
            let rows = inner.catalog.content_parts(&list)?;
            let mut md5_of_md5s = md5::Md5::new();
            for (_, part) in &rows {
                md5_of_md5s.update(part.md5);
            }
            let parts = rows.len() as u32;
            let compression = self.bucket_settings(&upload.bucket)?.effective.compression;
            out.push(GrowingObject {
                inner: Arc::clone(inner),
                upload_id: upload.upload_id,
                bucket: upload.bucket,
                key: upload.key,
                dataset: object.dataset.clone(),
                list,
                compression,
                content_type: object.content_type.clone(),
                state: Arc::new(Mutex::new(State {
                    parts,
                    begun: parts,
                    len_bytes: object.size_bytes,
                    md5_of_md5s,
                    user_metadata: object.user_metadata,
                    finished: false,
                })),
            });
        }
        Ok(out)
    }
}

impl GrowingObject {
    pub fn bucket(&self) -> &str {
        &self.bucket
    }
    pub fn key(&self) -> &str {
        &self.key
    }
    pub fn upload_id(&self) -> &str {
        &self.upload_id
    }
    /// Bytes of the durable prefix (what readers see).
    pub fn len_bytes(&self) -> u64 {
        self.state.lock().len_bytes
    }
    /// Pieces appended so far.
    pub fn pieces(&self) -> u32 {
        self.state.lock().parts
    }
    /// The user metadata of the last durable point.
    pub fn user_metadata(&self) -> Vec<(String, String)> {
        self.state.lock().user_metadata.clone()
    }

    /// Begin the next piece.
    pub fn piece(&self) -> Result<Piece> {
        let number = {
            let mut state = self.state.lock();
            if state.finished {
                return Err(StoreError::InvalidArgument(format!(
                    "{}/{} is finished; it takes no more pieces",
                    self.bucket, self.key
                )));
            }
            state.begun += 1;
            state.begun
        };
        let target = Target::Part {
            upload_id: self.upload_id.clone(),
            part_number: number,
            bucket: self.bucket.clone(),
            key: self.key.clone(),
            dataset: self.dataset.clone(),
            compression: self.compression,
        };
        let handle = PutHandle::begin(
            Arc::clone(&self.inner),
            target,
            PutOptions::default(),
            self.inner.config.chunk_bytes,
        )?;
        Ok(Piece { number, handle })
    }

    /// A durable point: add `piece` (the next in order) to the object and set its user metadata, in one
    /// catalog transaction. Returns the object's new size.
    pub fn append(&self, piece: SealedPiece, user_metadata: Vec<(String, String)>) -> Result<u64> {
        let mut state = self.state.lock();
        if piece.number != state.parts + 1 {
            return Err(StoreError::InvalidArgument(format!(
                "{}/{}: piece {} appended after piece {}; pieces go in order",
                self.bucket, self.key, piece.number, state.parts
            )));
        }
        let mut md5_of_md5s = state.md5_of_md5s.clone();
        md5_of_md5s.update(piece.md5);
        let append = GrowingAppend {
            bucket: self.bucket.clone(),
            key: self.key.clone(),
            list: self.list,
            upload_id: self.upload_id.clone(),
            part_number: piece.number,
            etag: etag(&md5_of_md5s, piece.number),
            md5: md5_of_md5s.clone().finalize().into(),
            user_metadata: user_metadata.clone(),
        };
        let now = permafrost_catalog::now_ms();
        let Some(part) = self.inner.catalog.append_growing(&append, now)? else {
            return Err(StoreError::InvalidArgument(format!(
                "{}/{} was deleted or replaced while it was growing",
                self.bucket, self.key
            )));
        };
        state.parts = piece.number;
        state.len_bytes = part.logical_offset + part.logical_bytes;
        state.md5_of_md5s = md5_of_md5s;
        state.user_metadata = user_metadata;
        Ok(state.len_bytes)
    }

    /// End the object with `user_metadata`: it becomes an ordinary immutable object made of the appended pieces
    /// (one catalog transaction; pieces begun or sealed but not appended are released).
    pub fn finish(&self, user_metadata: Vec<(String, String)>) -> Result<ObjectInfo> {
        let mut state = self.state.lock();
        if state.finished {
            return Err(StoreError::InvalidArgument(format!(
                "{}/{} is finished already",
                self.bucket, self.key
            )));
        }
        let rows = self.inner.catalog.content_parts(&self.list)?;
        let parts: Vec<ContentPart> = rows.iter().map(|(p, _)| *p).collect();
        let logical_bytes = parts.iter().map(|p| p.logical_bytes).sum();
        let list = NewPartList {
            id: part_list_id(&parts, Encoding::Identity),
            logical_bytes,
            md5: state.md5_of_md5s.clone().finalize().into(),
            parts: parts.iter().map(|p| (p.seq + 1, *p)).collect(),
        };
        let now = permafrost_catalog::now_ms();
        let object = ObjectRecord {
            bucket: self.bucket.clone(),
            key: self.key.clone(),
            content: list.id,
            size_bytes: logical_bytes,
            etag: etag(&state.md5_of_md5s, parts.len() as u32),
            last_modified_ms: now,
            content_type: self.content_type.clone(),
            user_metadata: user_metadata.clone(),
            checksums: Vec::new(),
            dataset: self.dataset.clone(),
            version_id: String::new(),
            attributes: Default::default(),
            expires_ms: None,
        };
        let outcome = self
            .inner
            .catalog
            .complete_upload(&self.upload_id, &object, &list, now)?;
        state.finished = true;
        state.user_metadata = user_metadata;
        drop(state);
        self.inner.run_work(outcome.work);
        self.inner.wake_persister();
        let (object, content) = self
            .inner
            .catalog
            .get_object(&self.bucket, &self.key)?
            .ok_or_else(|| StoreError::NoSuchKey {
                bucket: self.bucket.clone(),
                key: self.key.clone(),
            })?;
        self.inner.object_info(&object, &content)
    }
}
