//! An observing schedule as an operator uploads it (`START DURATION SCAN` lines): parsing never panics, and a
//! schedule that parses is in order, without overlaps, and starts no earlier than now.
#![no_main]
use libfuzzer_sys::fuzz_target;
use permafrost_record::schedule;

fuzz_target!(|data: &[u8]| {
    let Some((now, text)) = data.split_at_checked(8) else {
        return;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let now_ms = u64::from_le_bytes(now.try_into().unwrap()) >> 20;
    let _ = schedule::parse_duration_ms(text);
    let _ = schedule::parse_time_ms(text);
    let Ok(entries) = schedule::parse(text, now_ms) else {
        return;
    };
    let mut end = now_ms;
    for e in &entries {
        assert!(e.start_ms >= end, "entries in order and apart");
        assert!(e.duration_ms > 0);
        end = e.start_ms.saturating_add(e.duration_ms);
    }
});
