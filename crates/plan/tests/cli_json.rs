//! The `permafrost plan` command line: JSON fields, filters and charts.

use clap::Parser;
use permafrost_plan::cli::{run_to, PlanCommand};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: PlanCommand,
}

fn run(args: &[&str]) -> String {
    let cli = Cli::try_parse_from(std::iter::once("plan").chain(args.iter().copied())).unwrap();
    let mut out = Vec::new();
    run_to(cli.command, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn mttdl_json_has_mttdl_hours_disks_and_arrays_of_the_10_pb_example() {
    let json: serde_json::Value =
        serde_json::from_str(&run(&["mttdl", "--layout", "6+2", "--json"])).unwrap();
    assert_eq!(json["disks"], 3416);
    assert_eq!(json["arrays"], 427);
    assert_eq!(json["layout"], "6+2");
    let mttdl = json["mttdl_hours"].as_f64().unwrap();
    assert!((mttdl / 4.13e6 - 1.0).abs() < 0.01, "{mttdl}");
    let idr: serde_json::Value =
        serde_json::from_str(&run(&["mttdl", "--layout", "6+2", "--json", "--idr"])).unwrap();
    assert_eq!(idr["disks"], 3632);
}

#[test]
fn mttdl_flags_change_the_model() {
    let json = |args: &[&str]| -> serde_json::Value { serde_json::from_str(&run(args)).unwrap() };
    let base = json(&["mttdl", "--layout", "8+2", "--json"]);
    let small = json(&[
        "mttdl",
        "--layout",
        "8+2",
        "--json",
        "--capacity",
        "1PiB",
        "--disk-size",
        "8TiB",
    ]);
    assert_eq!(small["arrays"], 16); // 1,024 TiB / 8 TiB = 128 data disks = 16 arrays of 8
    let slow_rebuild = json(&["mttdl", "--layout", "8+2", "--json", "--mttr-hours", "48"]);
    assert!(
        slow_rebuild["mttdl_hours"].as_f64().unwrap() < base["mttdl_hours"].as_f64().unwrap() / 4.0
    );
    let several: serde_json::Value = serde_json::from_str(&run(&[
        "mttdl", "--layout", "6+2", "--layout", "12x6:9+1", "--json",
    ]))
    .unwrap();
    assert_eq!(several.as_array().unwrap().len(), 2);
}

#[test]
fn human_mttdl_output_is_a_table_with_both_idr_variants() {
    let text = run(&["mttdl", "--layout", "6+2"]);
    assert!(text.contains("MTTDL system h"), "{text}");
    assert!(text.contains("3416") && text.contains("3632"), "{text}");
}

#[test]
fn layouts_lists_table_4_4_grids_with_filters_and_sorting() {
    let rows: serde_json::Value = serde_json::from_str(&run(&[
        "layouts",
        "--disks",
        "192",
        "--json",
        "--min-efficiency",
        "70",
        "--sort",
        "efficiency",
    ]))
    .unwrap();
    let rows = rows.as_array().unwrap();
    assert!(rows
        .iter()
        .all(|r| r["efficiency_percent"].as_f64().unwrap() >= 70.0));
    let efficiencies: Vec<f64> = rows
        .iter()
        .map(|r| r["efficiency_percent"].as_f64().unwrap())
        .collect();
    assert!(
        efficiencies.windows(2).all(|w| w[0] >= w[1]),
        "sorted by efficiency"
    );
    let row = rows
        .iter()
        .find(|r| r["layout"] == "24x8:6+1")
        .expect("24x8:6+1 listed");
    // Table 4.4, ID 10: 70.6 %, 24 HPGs, 12 parallel writes, recovery 7 / 8.
    assert_eq!(
        (row["hpgs"].as_u64(), row["parallel_writes"].as_u64()),
        (Some(24), Some(12))
    );
    assert_eq!(
        (row["hpg_size"].as_u64(), row["vpg_size"].as_u64()),
        (Some(7), Some(8))
    );
    assert!(
        rows.iter().any(|r| r["layout"] == "14+2"),
        "arrays listed for comparison"
    );
    let strict: serde_json::Value = serde_json::from_str(&run(&[
        "layouts",
        "--disks",
        "192",
        "--json",
        "--min-mttdl",
        "1e11",
        "--no-arrays",
    ]))
    .unwrap();
    assert!(strict
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["mttdl_hours"].as_f64().unwrap() >= 1e11));
}

#[test]
fn plot_option_writes_svg_and_png_charts() {
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().to_str().unwrap();
    run(&[
        "mttdl", "--layout", "6+2", "--layout", "12x8:6+1", "--plot", plot,
    ]);
    run(&["layouts", "--disks", "96", "--plot", plot]);
    for name in ["mttdl", "layouts"] {
        let svg = std::fs::read_to_string(dir.path().join(format!("{name}.svg"))).unwrap();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        let png = std::fs::read(dir.path().join(format!("{name}.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert!(png.len() > 10_000);
    }
}
