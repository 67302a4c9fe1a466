//! SMART readings of the grid's disks (`smart_*` methods), on both back ends.

use permafrost_catalog::*;

mod common;
use common::Backend;

fn reading(disk: u32, at_ms: u64) -> SmartRecord {
    SmartRecord {
        disk,
        at_ms,
        reading: format!(
            r#"{{"at_unix_ms":{at_ms},"attributes":{{"5":{}}}}}"#,
            at_ms / 1000
        ),
    }
}

fn readings_keep_the_newest_per_disk_and_the_latest_is_each_disks_newest(b: Backend) {
    let (_guard, c) = common::open(b);
    let c: &dyn Catalog = &c;
    assert!(c.smart_latest().unwrap().is_empty());
    for at in 1..=6u64 {
        c.smart_append(&reading(0, at * 1000), 3).unwrap();
    }
    c.smart_append(&reading(2, 500), 3).unwrap();
    let disk0 = c.smart_history(0, 100).unwrap();
    assert_eq!(
        disk0.iter().map(|r| r.at_ms).collect::<Vec<_>>(),
        vec![4000, 5000, 6000],
        "the newest 3 of disk 0, oldest first"
    );
    assert_eq!(disk0[2], reading(0, 6000));
    assert_eq!(c.smart_history(0, 1).unwrap(), vec![reading(0, 6000)]);
    assert_eq!(
        c.smart_latest().unwrap(),
        vec![reading(0, 6000), reading(2, 500)],
        "pruning disk 0 kept disk 2's reading"
    );
    // The same instant again replaces the reading.
    let mut again = reading(2, 500);
    again.reading = "{}".to_string();
    c.smart_append(&again, 3).unwrap();
    assert_eq!(c.smart_history(2, 10).unwrap(), vec![again]);
    assert!(c.smart_history(1, 10).unwrap().is_empty());
}

both!(readings_keep_the_newest_per_disk_and_the_latest_is_each_disks_newest);
