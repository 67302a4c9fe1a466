//! A chunk index as read from a manifest on disk: decoding never panics, and an index that decodes encodes
//! back to the bytes it was decoded from, and decodes again to the same index.
#![no_main]
use libfuzzer_sys::fuzz_target;
use permafrost_format::ChunkIndex;

fuzz_target!(|data: &[u8]| {
    let Ok((index, used)) = ChunkIndex::decode(data) else {
        return;
    };
    assert!(used <= data.len());
    let encoded = index.encode();
    assert_eq!(encoded.len(), index.encoded_len());
    assert_eq!(
        &encoded[..],
        &data[..used],
        "an index encodes to the bytes it came from"
    );
    let (again, again_used) = ChunkIndex::decode(&encoded).expect("an encoded index decodes");
    assert_eq!(again_used, encoded.len());
    assert_eq!(again, index);
    // Every logical offset inside the index falls in a chunk.
    if index.logical_len() > 0 {
        assert!(index.chunk_at(index.logical_len() - 1).is_some());
        assert!(index.chunk_at(index.logical_len()).is_none());
    }
});
