//! The topology, live link utilisation, reporters and transfers in the cluster's shared tables
//! (`permafrost_catalog::cluster`, schema version 3) on the test PostgreSQL server, one database per test.

mod common;

use std::time::Duration;

use permafrost_catalog::cluster::{
    ClusterDb, LinkReport, LinkSample, TransferKind, TransferStart, CLUSTER_SCHEMA_VERSION,
    TRANSFERS_KEPT,
};
use permafrost_topology::{replication_tree, Demand, Role, Topology};

const EXAMPLE: &str = include_str!("../../../docs/cluster-topology.toml");

fn example() -> Topology {
    Topology::from_toml_str(EXAMPLE).unwrap()
}

fn report(reporter: &str, node: &str, links: &[(&str, &str, f64)]) -> LinkReport {
    LinkReport {
        reporter: reporter.into(),
        node: node.into(),
        kind: "relay".into(),
        streams: 1,
        bytes_in: 10,
        bytes_out: 20,
        links: links
            .iter()
            .map(|(from, to, mbit)| LinkSample {
                from: (*from).into(),
                to: (*to).into(),
                mbit: *mbit,
                bytes: 1000,
            })
            .collect(),
    }
}

fn used(t: &Topology, from: &str, to: &str) -> f64 {
    let (a, b) = (t.node_id(from).unwrap(), t.node_id(to).unwrap());
    t.link(t.link_between(a, b).unwrap()).used_mbit_from(a)
}

#[test]
fn the_topology_round_trips_and_is_replaced_only_when_it_changed() {
    let Some(url) = common::fresh_database("ct") else {
        return;
    };
    let db = ClusterDb::connect(&url, 1000).unwrap();
    assert!(db.topology().unwrap().is_none());
    assert!(db.topology_live().unwrap().is_none());
    let t = example();
    let load = db.store_topology(&t, "/data/topology.toml", "n1").unwrap();
    assert!(load.replaced && load.first, "{load:?}");
    assert_eq!((load.nodes, load.links), (10, 9));
    let (back, source) = db.topology().unwrap().unwrap();
    assert_eq!(back.nodes(), t.nodes());
    assert_eq!(back.links(), t.links());
    assert_eq!(
        (source.source.as_str(), source.loaded_by.as_str()),
        ("/data/topology.toml", "n1")
    );
    assert_eq!(back.node(back.node_id("core").unwrap()).degree_max, Some(3));
    // The same content from another node: unchanged.
    let again = db.store_topology(&t, "/other/topology.toml", "n2").unwrap();
    assert!(!again.replaced && !again.first);
    assert_eq!(again.hash, load.hash);
    assert_eq!(db.topology().unwrap().unwrap().1.loaded_by, "n1");
    // A changed file replaces it whole.
    let changed = EXAMPLE.replace("degree_max = 3", "degree_max = 2").replace(
        "between = [\"edge2\", \"n6\"]\ncapacity_mbit = 200",
        "between = [\"edge2\", \"n6\"]\ncapacity_mbit = 1000",
    );
    let t2 = Topology::from_toml_str(&changed).unwrap();
    let load2 = db.store_topology(&t2, "/data/topology.toml", "n3").unwrap();
    assert!(load2.replaced && !load2.first);
    assert_ne!(load2.hash, load.hash);
    let (back2, source2) = db.topology().unwrap().unwrap();
    assert_eq!(back2.links(), t2.links());
    assert_eq!(
        back2.node(back2.node_id("core").unwrap()).degree_max,
        Some(2)
    );
    assert_eq!(source2.loaded_by, "n3");
    // Roles survive.
    assert_eq!(back2.with_role(Role::Relay).len(), 3);
    assert_eq!(back2.with_role(Role::Node).len(), 6);
}

#[test]
fn live_use_sums_fresh_reporters_clamps_to_capacity_and_forgets_stale_ones() {
    let Some(url) = common::fresh_database("ct") else {
        return;
    };
    let db = ClusterDb::connect(&url, 1000).unwrap();
    let file = EXAMPLE.replacen("used_mbit = [0, 0]", "used_mbit = [5, 7]", 1);
    db.store_topology(&Topology::from_toml_str(&file).unwrap(), "f", "n1")
        .unwrap();
    // Two processes each count their own connections on client→core; core measures core→edge1 beyond the
    // link's capacity; a measurement of a pair without a link is ignored.
    db.report_links(&report(
        "client/a",
        "client",
        &[("client", "core", 50.0), ("core", "client", 0.5)],
    ))
    .unwrap();
    db.report_links(&report("client/b", "client", &[("client", "core", 30.0)]))
        .unwrap();
    db.report_links(&report(
        "core/c",
        "core",
        &[("core", "edge1", 500.0), ("n1", "n2", 10.0)],
    ))
    .unwrap();
    let live = db.topology_live().unwrap().unwrap();
    assert_eq!(used(&live, "client", "core"), 80.0);
    assert_eq!(used(&live, "core", "client"), 0.5);
    assert_eq!(used(&live, "core", "edge1"), 200.0, "clamped to capacity");
    assert_eq!(used(&live, "edge1", "core"), 0.0);
    let uses = db.link_use(10_000).unwrap();
    let cc = uses
        .iter()
        .find(|u| u.from == "client" && u.to == "core")
        .unwrap();
    assert_eq!((cc.mbit, cc.bytes, cc.fresh_reporters), (80.0, 2000, 2));
    // A reporter's next report replaces its row.
    db.report_links(&report("client/b", "client", &[("client", "core", 10.0)]))
        .unwrap();
    assert_eq!(
        used(&db.topology_live().unwrap().unwrap(), "client", "core"),
        60.0
    );
    // Stale measurements count no more: the direction goes back to the file's starting value.
    std::thread::sleep(Duration::from_millis(600));
    db.report_links(&report("client/a", "client", &[("client", "core", 1.0)]))
        .unwrap();
    let live = db.topology_live_within(400).unwrap().unwrap();
    assert_eq!(used(&live, "client", "core"), 1.0, "only client/a is fresh");
    assert_eq!(
        used(&live, "core", "client"),
        7.0,
        "stale: the file's value"
    );
    assert_eq!(used(&live, "core", "edge1"), 0.0);
    let uses = db.link_use(400).unwrap();
    let ce = uses
        .iter()
        .find(|u| u.from == "core" && u.to == "edge1")
        .unwrap();
    assert_eq!((ce.mbit, ce.fresh_reporters), (0.0, 0));
    assert!(ce.age_ms >= 500, "{ce:?}");
    // Every reporter with its last report.
    let reporters = db.reporters().unwrap();
    let names: Vec<&str> = reporters.iter().map(|r| r.reporter.as_str()).collect();
    assert_eq!(names, ["client/a", "client/b", "core/c"]);
    assert_eq!(
        (reporters[2].node.as_str(), reporters[2].bytes_out),
        ("core", 20)
    );
    assert!(reporters[2].age_ms >= 500 && reporters[0].age_ms < 500);
}

#[test]
fn a_tree_from_the_live_topology_avoids_a_loaded_link() {
    let Some(url) = common::fresh_database("ct") else {
        return;
    };
    let db = ClusterDb::connect(&url, 1000).unwrap();
    db.store_topology(&example(), "f", "n1").unwrap();
    let tree_now = |db: &ClusterDb| {
        let t = db.topology_live().unwrap().unwrap();
        let client = t.node_id("client").unwrap();
        let data = t.with_role(Role::Node);
        let tree = replication_tree(&t, client, &Demand::any(&data, 2)).unwrap();
        (tree.named_edges(&t), tree.render(&t))
    };
    // Idle: ties by name put both copies under edge1.
    let (edges, shown) = tree_now(&db);
    assert!(edges.contains(&("core".into(), "edge1".into())), "{shown}");
    // core→edge1 loaded (measured by core): the tree goes through edge2 instead.
    db.report_links(&report("core/x", "core", &[("core", "edge1", 150.0)]))
        .unwrap();
    let (edges, shown) = tree_now(&db);
    assert!(!edges.contains(&("core".into(), "edge1".into())), "{shown}");
    assert!(edges.contains(&("core".into(), "edge2".into())), "{shown}");
    // Load on the other direction (edge1→core, a parity tree's direction) does not matter to a write.
    db.report_links(&report(
        "core/x",
        "core",
        &[("core", "edge1", 0.0), ("edge1", "core", 190.0)],
    ))
    .unwrap();
    let (edges, shown) = tree_now(&db);
    assert!(edges.contains(&("core".into(), "edge1".into())), "{shown}");
    // Load on one edge link (edge1→n1) moves that copy to another data node under edge1.
    db.report_links(&report("edge1/y", "edge1", &[("edge1", "n1", 100.0)]))
        .unwrap();
    let (edges, shown) = tree_now(&db);
    assert!(!edges.contains(&("edge1".into(), "n1".into())), "{shown}");
    assert_eq!(shown, "client → core → edge1 → { n2, n3 }");
}

#[test]
fn transfers_are_recorded_from_start_to_finish_and_kept_bounded() {
    let Some(url) = common::fresh_database("ct") else {
        return;
    };
    let db = ClusterDb::connect(&url, 1000).unwrap();
    let start = |name: &str| TransferStart {
        name: name.into(),
        kind: TransferKind::Write,
        root: "client".into(),
        tree: "client → core → edge1 → { n1, n2 }".into(),
        k: 2,
        bytes: 1 << 20,
    };
    let a = db.transfer_started(&start("a")).unwrap();
    let b = db
        .transfer_started(&TransferStart {
            kind: TransferKind::Rebuild,
            root: "n6".into(),
            ..start("b")
        })
        .unwrap();
    let listed = db.transfers(10).unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|t| t.running && t.outcome.is_none()));
    assert_eq!(listed[0].id, b, "newest first");
    assert_eq!(
        (listed[0].kind.as_str(), listed[0].root.as_str()),
        ("rebuild", "n6")
    );
    std::thread::sleep(Duration::from_millis(50));
    db.transfer_finished(a, "ok", Some("client → core → edge2 → { n4, n5 }"))
        .unwrap();
    let listed = db.transfers(10).unwrap();
    assert_eq!(listed[0].id, b, "running ones first");
    let done = &listed[1];
    assert_eq!(done.outcome.as_deref(), Some("ok"));
    assert!(!done.running && done.duration_ms >= 50, "{done:?}");
    assert_eq!(done.tree, "client → core → edge2 → { n4, n5 }");
    db.transfer_finished(b, "failed: n2: cannot connect", None)
        .unwrap();
    assert_eq!(
        db.transfers(10).unwrap()[0].tree,
        "client → core → edge1 → { n1, n2 }"
    );
    assert!(db.transfer_finished(9_999_999, "ok", None).is_err());
    // Bounded: the newest TRANSFERS_KEPT finished ones stay.
    for i in 0..TRANSFERS_KEPT + 5 {
        let id = db.transfer_started(&start(&format!("t{i}"))).unwrap();
        db.transfer_finished(id, "ok", None).unwrap();
    }
    db.transfer_started(&start("last")).unwrap();
    let all = db.transfers(1000).unwrap();
    assert_eq!(all.len() as i64, TRANSFERS_KEPT + 1, "{}", all.len());
    assert_eq!(all[0].name, "last");
    assert_eq!(all[1].name, format!("t{}", TRANSFERS_KEPT + 4));
}

#[test]
fn a_version_1_database_is_migrated_and_a_newer_one_refused() {
    let Some(url) = common::fresh_database("ct") else {
        return;
    };
    ClusterDb::connect(&url, 1000).unwrap();
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let version = |client: &mut postgres::Client| -> String {
        client
            .query_one(
                "SELECT value FROM permafrost_cluster.meta WHERE key = 'schema_version'",
                &[],
            )
            .unwrap()
            .get(0)
    };
    assert_eq!(version(&mut client), CLUSTER_SCHEMA_VERSION.to_string());
    // As a version-1 build left it: no topology tables.
    client
        .batch_execute(
            "DROP TABLE permafrost_cluster.topology_meta, permafrost_cluster.topology_nodes, \
             permafrost_cluster.topology_links, permafrost_cluster.link_use, permafrost_cluster.reporters, \
             permafrost_cluster.transfers, permafrost_cluster.fragments; \
             ALTER TABLE permafrost_cluster.buckets DROP COLUMN parity; \
             UPDATE permafrost_cluster.meta SET value = '1' WHERE key = 'schema_version'",
        )
        .unwrap();
    let db = ClusterDb::connect(&url, 1000).unwrap();
    assert_eq!(version(&mut client), CLUSTER_SCHEMA_VERSION.to_string());
    db.store_topology(&example(), "f", "n1").unwrap();
    assert!(db.topology_live().unwrap().is_some());
    // Version 4: the bucket's parity and the fragments table.
    db.add_bucket("b").unwrap();
    db.set_bucket_parity("b", Some("xor")).unwrap();
    assert_eq!(db.bucket_parity("b").unwrap().as_deref(), Some("xor"));
    assert!(db.fragments_on(1).unwrap().is_empty());
    client
        .batch_execute(
            "UPDATE permafrost_cluster.meta SET value = '99' WHERE key = 'schema_version'",
        )
        .unwrap();
    let e = ClusterDb::connect(&url, 1000).err().unwrap().to_string();
    assert!(e.contains("schema version 99"), "{e}");
}
