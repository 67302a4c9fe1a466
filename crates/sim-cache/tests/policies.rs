//! Each policy on small hand-made traces with hit counts worked out by hand.

use permafrost_sim_cache::{
    fill_next_access, new_cache, simulate, sweep, ArcCache, Cache, CompactTrace, Layout, Policy,
    Request, SweepOptions, NEVER,
};
use permafrost_trace::{Op, Record};
use rand::{Rng, SeedableRng};

/// GETs of unit-size objects named by letters, one per ms.
fn gets(names: &str) -> Vec<Record> {
    names
        .bytes()
        .enumerate()
        .map(|(index, name)| Record::new(index as u64, Op::Get, u64::from(name), 1))
        .collect()
}

fn compact(records: Vec<Record>) -> CompactTrace {
    CompactTrace::from_records(records.into_iter().map(Ok::<_, ()>), 0.0).unwrap()
}

fn hits(policy: Policy, capacity_bytes: u64, records: Vec<Record>) -> u64 {
    let trace = compact(records);
    simulate(&trace, policy, Layout::Combined, capacity_bytes, 0, |_| {})
        .total
        .hits
}

const SEQUENCE: &str = "ABCADBAC";

#[test]
fn lru_keeps_the_recently_used() {
    // [A] [BA] [CBA] A hit [ACB] D evicts B [DAC] B evicts C [BDA] A hit [ABD] C evicts D.
    assert_eq!(hits(Policy::Lru, 3, gets(SEQUENCE)), 2);
}

#[test]
fn mru_evicts_the_most_recently_used() {
    // [CBA] A hit [ACB] D evicts A [DCB] B hit [BDC] A evicts B [ADC] C hit.
    assert_eq!(hits(Policy::Mru, 3, gets(SEQUENCE)), 3);
}

#[test]
fn fifo_ignores_hits() {
    // [CBA] A hit (stays last) D evicts A [DCB] B hit A evicts B [ADC] C hit.
    assert_eq!(hits(Policy::Fifo, 3, gets(SEQUENCE)), 3);
    // Where LRU and FIFO differ: after A's hit LRU keeps A, FIFO evicts it.
    assert_eq!(hits(Policy::Lru, 2, gets("ABACA")), 2);
    assert_eq!(hits(Policy::Fifo, 2, gets("ABACA")), 1);
}

#[test]
fn belady_evicts_the_furthest_next_use_and_skips_objects_never_read_again() {
    // A B C miss; A hit; D (never read again) is not kept; B, A, C hit.
    assert_eq!(hits(Policy::Belady, 3, gets(SEQUENCE)), 4);
    // With next-access times given in the trace (they win over computed ones): claim A is never
    // read again, and Bélády drops it although it is.
    let mut records = gets("ABA");
    records[0].next_access = permafrost_trace::NextAccess::Never;
    records[1].next_access = permafrost_trace::NextAccess::Never;
    records[2].next_access = permafrost_trace::NextAccess::Never;
    let trace = compact(records);
    assert!(trace.next_from_trace);
    assert_eq!(
        simulate(&trace, Policy::Belady, Layout::Combined, 3, 0, |_| {})
            .total
            .hits,
        0
    );
}

#[test]
fn belady_is_optimal_for_unit_sizes() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let names: Vec<u8> = (0..4000)
        .map(|_| b'A' + (rng.gen::<f64>().powi(3) * 40.0) as u8)
        .collect();
    let records = gets(std::str::from_utf8(&names).unwrap());
    for capacity in [2, 5, 10, 20] {
        let optimal = hits(Policy::Belady, capacity, records.clone());
        for policy in [
            Policy::Lru,
            Policy::Mru,
            Policy::Fifo,
            Policy::Random,
            Policy::Arc,
        ] {
            let other = hits(policy, capacity, records.clone());
            assert!(
                other <= optimal,
                "{policy:?} with capacity {capacity}: {other} hits > Bélády's {optimal}"
            );
        }
    }
}

#[test]
fn random_averages_seeds_and_hits_when_everything_fits() {
    let trace = compact(gets("ABCABCABC"));
    let options = SweepOptions {
        policies: vec![Policy::Random],
        capacities_bytes: vec![2, 3],
        by_size_class: false,
        random_seeds: 5,
        threads: 2,
    };
    let points = sweep(&trace, &options, &|_| {});
    assert_eq!(points.len(), 2);
    assert!(points.iter().all(|p| p.runs == 5));
    let fits = points.iter().find(|p| p.capacity_bytes == 3).unwrap();
    assert_eq!(
        fits.total.hits,
        5 * 6,
        "every re-read hits when all three objects fit"
    );
    let tight = points.iter().find(|p| p.capacity_bytes == 2).unwrap();
    assert!(tight.total.hits < 5 * 6);
}

#[test]
fn sweep_results_do_not_depend_on_thread_count() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let records: Vec<Record> = (0..3000u64)
        .map(|t| {
            Record::new(
                t,
                if rng.gen_bool(0.3) { Op::Put } else { Op::Get },
                rng.gen_range(0..300),
                rng.gen_range(1..100),
            )
        })
        .collect();
    let trace = compact(records);
    let mut options = SweepOptions {
        policies: Policy::ALL.to_vec(),
        capacities_bytes: vec![500, 3000],
        by_size_class: true,
        random_seeds: 3,
        threads: 1,
    };
    let one = sweep(&trace, &options, &|_| {});
    options.threads = 3;
    assert_eq!(one, sweep(&trace, &options, &|_| {}));
}

#[test]
fn caches_hold_whole_objects_within_byte_capacity() {
    for policy in Policy::ALL {
        let mut cache = new_cache(policy, 10, 8, 1);
        cache.get(0, 6, 100);
        cache.get(1, 4, 50);
        assert!(cache.used_bytes() <= 10);
        cache.get(2, 5, 60);
        assert!(cache.used_bytes() <= 10, "{policy:?}");
        assert!(
            !cache.get(3, 11, 70),
            "{policy:?}: larger than the cache is a miss"
        );
        assert!(
            !cache.contains(3),
            "{policy:?}: an object larger than the cache passes by"
        );
    }
    // LRU with sizes: A(6) B(4) A hit, C(5) evicts B then A.
    let mut lru = new_cache(Policy::Lru, 10, 4, 0);
    assert!(!lru.get(0, 6, NEVER));
    assert!(!lru.get(1, 4, NEVER));
    assert!(lru.get(0, 6, NEVER));
    assert!(!lru.get(2, 5, NEVER));
    assert!(!lru.contains(1) && !lru.contains(0) && lru.contains(2));
}

#[test]
fn put_delete_and_rename_change_the_cache_as_the_thesis_simulator_does() {
    for policy in Policy::ALL {
        let mut cache = new_cache(policy, 100, 4, 3);
        cache.put(0, 10, 5);
        assert!(cache.get(0, 10, 7), "{policy:?}: a PUT loads the object");
        cache.remove(0);
        assert!(!cache.contains(0), "{policy:?}: DEL drops it");
        cache.put(1, 10, 9);
        cache.rename(1, 2, 9);
        assert!(
            !cache.contains(1) && cache.contains(2),
            "{policy:?}: RENAME moves it"
        );
        assert_eq!(cache.used_bytes(), 10, "{policy:?}");
    }
}

#[test]
fn arc_adapts_its_target_on_ghost_hits() {
    // Capacity 4 unit objects. Worked by hand (T1/T2 most recent first):
    //  1 A miss T1[A]            2 A hit T2[A]          3 B miss T1[B]
    //  4 C miss T1[CB]           5 D miss T1[DCB]       6 E miss: B → ghost B1, T1[EDC]
    //  7 B ghost hit in B1: p 0→1; C → B1; T2[BA]       8 A hit T2[AB]
    //  9 C ghost hit in B1: p 1→2; |T1| = p so T2's LRU B → B2; T2[CA]
    // 10 B ghost hit in B2: p 2→1; |T1| = 2 > p so D → B1; T2[BCA], T1[E]
    let mut arc = ArcCache::new(4, 8);
    let sequence = [0u32, 0, 1, 2, 3, 4, 1, 0, 2, 1];
    let expected_p = [0u64, 0, 0, 0, 0, 0, 1, 1, 2, 1];
    let mut hit_count = 0;
    for (step, (object, p)) in sequence.iter().zip(expected_p).enumerate() {
        hit_count += u32::from(arc.get(*object, 1, NEVER));
        assert_eq!(arc.p_bytes(), p, "p after step {}", step + 1);
    }
    assert_eq!(hit_count, 2);
    assert_eq!(
        arc.list_bytes(),
        [1, 3, 1, 0],
        "T1 [E], T2 [B C A], B1 [D], B2 []"
    );
}

#[test]
fn arc_resists_a_scan_that_flushes_lru() {
    // A and B are used twice, then ten objects are read once, then A and B again.
    let trace = "ABAB0123456789AB";
    assert_eq!(hits(Policy::Lru, 4, gets(trace)), 2);
    assert_eq!(hits(Policy::Arc, 4, gets(trace)), 4);
}

#[test]
fn next_access_follows_renames_and_ends_at_overwrites() {
    let records = [
        (0, Op::Put, 1, None),
        (10, Op::Get, 1, None),
        (20, Op::Rename, 1, Some(2)),
        (30, Op::Get, 2, None),
        (40, Op::Put, 2, None),
        (50, Op::Del, 2, None),
        (60, Op::Get, 3, None),
    ];
    let mut requests: Vec<Request> = records
        .iter()
        .map(|(_, op, object, target)| Request {
            next_ms: 0,
            size_bytes: 1,
            object: *object,
            target: target.unwrap_or(*object),
            op: *op,
        })
        .collect();
    let times: Vec<u64> = records.iter().map(|r| r.0).collect();
    fill_next_access(&mut requests, &times, 4);
    let next: Vec<u64> = requests.iter().map(|r| r.next_ms).collect();
    assert_eq!(next, vec![10, 30, 30, NEVER, NEVER, NEVER, NEVER]);
}

#[test]
fn warm_up_requests_load_the_cache_but_are_not_counted() {
    // Times 0..9; warm-up 0.5 → the first five requests (t < 4.5 → t ≤ 4) are warm-up.
    let trace =
        CompactTrace::from_records(gets("ABABABABAB").into_iter().map(Ok::<_, ()>), 0.5).unwrap();
    assert_eq!(trace.warmup_requests, 5);
    let result = simulate(&trace, Policy::Lru, Layout::Combined, 2, 0, |_| {});
    assert_eq!((result.total.gets, result.total.hits), (5, 5));
}

#[test]
fn size_class_caches_split_capacity_by_footprint_and_follow_class_changes() {
    const MIB: u64 = 1 << 20;
    // Object 1 is Tiny (100 KiB), object 2 Huge (100 MiB); then object 1 grows to Medium (2 MiB).
    let records = vec![
        Record::new(0, Op::Put, 1, 100 * 1024),
        Record::new(1, Op::Put, 2, 100 * MIB),
        Record::new(2, Op::Get, 1, 100 * 1024),
        Record::new(3, Op::Get, 2, 100 * MIB),
        Record::new(4, Op::Put, 1, 2 * MIB),
        Record::new(5, Op::Get, 1, 2 * MIB),
    ];
    let trace = compact(records);
    let capacities = permafrost_sim_cache::class_capacities(&trace, 204 * MIB);
    assert_eq!(
        capacities[0], 0,
        "no object stays Tiny: the footprint counts each object at its largest"
    );
    assert!(capacities[2] > 2 * MIB && capacities[4] > 100 * MIB);
    let result = simulate(
        &trace,
        Policy::Lru,
        Layout::BySizeClass,
        204 * MIB,
        0,
        |_| {},
    );
    // The Tiny GET misses (its class has no room); the Huge GET hits; the Medium one hits.
    assert_eq!(result.total.hits, 2);
    assert_eq!(result.by_class[0].gets, 1);
}
