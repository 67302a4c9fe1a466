//! A store whose grid grew by a data disk (`permafrost grid add-disk`, `Engine::add_disk`) while it was closed:
//! reopened, it places objects written afterwards on the new bucket (the emptiest), and reads every object back.
//! And a store whose open grid grew (`Engine::add_disk_live`): a new dataset lands on the new disk with the
//! default placement.

mod common;

use common::*;
use permafrost_engine::{AddDisk, DiskSpec, Engine};
use permafrost_store::*;

#[test]
fn objects_written_after_the_grid_grew_land_on_the_new_disk() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    // The embedded grid's layout (permafrost serve's default), on small sparse disks.
    let config = || {
        let mut config = config();
        config.grid.layout = "8x6:4+1".into();
        config.grid.disk_capacity_bytes = 96 << 20;
        // The least-full bucket takes each object (the default placement keeps datasets on spinning disks and
        // reaches an empty bucket only as the others fill).
        config.default_placement = "least-full".into();
        config
    };
    let store = Store::open(dir, config()).unwrap();
    store
        .create_bucket("bkt", BucketSettings::default())
        .unwrap();
    let mut objects = Vec::new();
    // Every bucket holds data before the grid grows.
    for i in 0..32u64 {
        let body = data(i, 300_000, false);
        let key = format!("before-{i}/object");
        put(&store, "bkt", &key, &body);
        objects.push((key, body));
        store.persist_now().unwrap();
    }
    let used = store.status().unwrap().used_bytes_per_grid_bucket;
    assert_eq!(used.len(), 32, "every bucket holds data: {used:?}");
    assert_eq!(store.engine().buckets(), 32);
    store.close().unwrap();

    let report = Engine::add_disk(
        dir.join("grid"),
        AddDisk {
            spec: DiskSpec::File {
                path: "disks/disk-48.img".into(),
                capacity_bytes: 96 << 20,
            },
            hpg: None,
            column: None,
        },
    )
    .unwrap();
    assert_eq!((report.disk, report.bucket), (48, 32));

    let store = Store::open(dir, config()).unwrap();
    assert_eq!(store.engine().buckets(), 33);
    for i in 0..4u64 {
        let body = data(100 + i, 300_000, false);
        let key = format!("after/{i}");
        put(&store, "bkt", &key, &body);
        objects.push((key, body));
    }
    store.persist_now().unwrap();
    let status = store.status().unwrap();
    let on_new = status
        .used_bytes_per_grid_bucket
        .iter()
        .find(|(bucket, _)| *bucket == 32)
        .map_or(0, |(_, bytes)| *bytes);
    println!("per grid bucket: {:?}", status.used_bytes_per_grid_bucket);
    assert!(
        on_new > 0,
        "nothing was placed on the new bucket 32: {:?}",
        status.used_bytes_per_grid_bucket
    );
    for (key, body) in &objects {
        assert_eq!(&get(&store, "bkt", key), body, "{key}");
    }
    store.close().unwrap();
}

/// The grid of an open store grows (`Engine::add_disk_live`, what `POST /disks` runs): with the default placement
/// (dataset-affinity) a new dataset goes to the new disk, the emptiest, at once; nothing is reopened.
#[test]
fn a_new_dataset_lands_on_a_disk_added_to_the_open_grid_with_the_default_placement() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let config = || {
        let mut config = config();
        config.grid.layout = "8x6:4+1".into();
        config.grid.disk_capacity_bytes = 96 << 20;
        config
    };
    assert_eq!(config().default_placement, "dataset-affinity");
    let store = Store::open(dir, config()).unwrap();
    store
        .create_bucket("bkt", BucketSettings::default())
        .unwrap();
    let mut objects = Vec::new();
    for i in 0..3u64 {
        let body = data(i, 300_000, false);
        let key = format!("old-{i}/object");
        put(&store, "bkt", &key, &body);
        objects.push((key, body));
    }
    store.persist_now().unwrap();

    let report = store
        .engine()
        .add_disk_live(AddDisk {
            spec: DiskSpec::File {
                path: "disks/disk-48.img".into(),
                capacity_bytes: 96 << 20,
            },
            hpg: None,
            column: None,
        })
        .unwrap();
    assert_eq!((report.disk, report.bucket), (48, 32));
    assert_eq!(store.engine().buckets(), 33);
    for i in 0..4u64 {
        let body = data(100 + i, 300_000, false);
        let key = format!("fresh/{i}");
        put(&store, "bkt", &key, &body);
        objects.push((key, body));
    }
    store.persist_now().unwrap();
    let used = store.status().unwrap().used_bytes_per_grid_bucket;
    println!("per grid bucket: {used:?}");
    let on_new = used
        .iter()
        .find(|(bucket, _)| *bucket == 32)
        .map_or(0, |(_, bytes)| *bytes);
    assert!(
        on_new >= 4 * 300_000,
        "the new dataset is not (all) on the new bucket 32: {used:?}"
    );
    for (key, body) in &objects {
        assert_eq!(&get(&store, "bkt", key), body, "{key}");
    }
    store.close().unwrap();
    let store = Store::open(dir, config()).unwrap();
    assert_eq!(store.engine().buckets(), 33);
    for (key, body) in &objects {
        assert_eq!(&get(&store, "bkt", key), body, "{key}");
    }
    store.close().unwrap();
}
