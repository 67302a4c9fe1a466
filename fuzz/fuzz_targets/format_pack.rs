//! Pack extents (many small contents in one extent payload). Raw mode: any bytes with any announced payload
//! length iterate to the end without a panic and never past the announced length. Written mode: the entries
//! a `PackWriter` appended read back exactly, in order, at the offsets the writer reported.
#![no_main]
use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use permafrost_format::{Algorithm, Manifest, PackReader, PackWriter, Role, StoredForm};

#[derive(Debug, Arbitrary)]
struct Entry {
    key: String,
    meta: Vec<(String, String)>,
    content_type: Option<String>,
    created: u64,
    data: Vec<u8>,
}

#[derive(Debug, Arbitrary)]
enum Input {
    Raw {
        payload_len: u16,
        bytes: Vec<u8>,
    },
    Written {
        payload_max: u16,
        entries: Vec<Entry>,
    },
}

fn manifest(e: &Entry) -> Manifest {
    Manifest {
        bucket: "fuzz".into(),
        key: e.key.clone(),
        user_metadata: e.meta.iter().cloned().collect::<BTreeMap<_, _>>(),
        content_type: e.content_type.clone(),
        content_encoding: Algorithm::None,
        stored_form: StoredForm::Raw,
        logical_len: e.data.len() as u64,
        stored_len: e.data.len() as u64,
        blake3: *blake3::hash(&e.data).as_bytes(),
        created_unix_ms: e.created,
        dataset: "fuzz".into(),
        role: Role::Object,
    }
}

fuzz_target!(|input: Input| match input {
    Input::Raw { payload_len, bytes } => {
        let Ok(reader) = PackReader::new(&bytes[..], u64::from(payload_len)) else {
            return;
        };
        for entry in reader {
            let Ok(entry) = entry else { continue };
            assert!(
                entry.stored_offset + entry.stored.len() as u64 <= u64::from(payload_len),
                "an entry ends inside the announced payload"
            );
        }
    }
    Input::Written {
        payload_max,
        entries,
    } => {
        let mut writer =
            PackWriter::new(Vec::new(), u32::from(payload_max) + 5).expect("a pack opens");
        let mut written = Vec::new();
        for e in &entries {
            let m = manifest(e);
            if let Ok(placement) = writer.append(&m, &e.data[..]) {
                written.push((m, e.data.clone(), placement));
            }
        }
        let (payload_len, bytes) = writer.finish().expect("a pack finishes");
        assert_eq!(payload_len as usize, bytes.len());
        let read: Vec<_> = PackReader::new(&bytes[..], u64::from(payload_len))
            .expect("a written pack reads")
            .collect::<Result<_, _>>()
            .expect("every written entry reads");
        assert_eq!(read.len(), written.len());
        for (entry, (m, data, placement)) in read.iter().zip(&written) {
            assert_eq!(&entry.manifest, m);
            assert_eq!(&entry.stored, data);
            assert_eq!(entry.entry_offset, placement.entry_offset);
            assert_eq!(entry.stored_offset, placement.stored_offset);
        }
    }
});
