//! The model reproduces thesis Table 4.2 (10 PB of user data on n+k arrays) within 1 %.

use permafrost_plan::{plan_system, GridDepth, ModelParams, PlanLayout, TIB};

/// The thesis's 10 PB example: 10,240 TiB of user data.
const USER_DATA_BYTES: u128 = 10_240 * TIB as u128;

/// (layout, with IDR: MTTDL hours, disks; without IDR: MTTDL hours, disks): every `n+2` and `n+3`
/// row of Table 4.2 (16 rows, 6 ≤ n ≤ 13), in the table's order.
const TABLE_4_2: [(&str, f64, u64, f64, u64); 16] = [
    ("6+2", 3.86e7, 3_632, 4.13e6, 3_416),
    ("7+2", 3.00e7, 3_501, 3.21e6, 3_294),
    ("6+3", 1.79e11, 4_086, 1.91e10, 3_843),
    ("8+2", 2.40e7, 3_400, 2.57e6, 3_200),
    ("7+3", 1.25e11, 3_890, 1.34e10, 3_660),
    ("8+3", 9.09e10, 3_751, 9.73e9, 3_520),
    ("9+2", 1.96e7, 3_333, 2.10e6, 3_135),
    ("9+3", 6.81e10, 3_636, 7.29e9, 3_420),
    ("10+2", 1.64e7, 3_264, 1.75e6, 3_072),
    ("11+2", 1.38e7, 3_224, 1.48e6, 3_029),
    ("10+3", 5.26e10, 3_536, 5.62e9, 3_328),
    ("11+3", 4.11e10, 3_472, 4.41e9, 3_262),
    ("12+2", 1.19e7, 3_178, 1.27e6, 2_996),
    ("13+2", 1.03e7, 3_150, 1.10e6, 2_955),
    ("12+3", 3.30e10, 3_405, 3.52e9, 3_210),
    ("13+3", 2.67e10, 3_360, 2.87e9, 3_152),
];

#[test]
fn table_4_2_n_plus_2_and_n_plus_3_rows_are_reproduced_within_one_percent() {
    for (layout, idr_mttdl, idr_disks, plain_mttdl, plain_disks) in TABLE_4_2 {
        let layout: PlanLayout = layout.parse().unwrap();
        for (idr, mttdl, disks) in [
            (true, idr_mttdl, idr_disks),
            (false, plain_mttdl, plain_disks),
        ] {
            let plan = plan_system(
                &layout,
                &ModelParams::thesis(idr),
                USER_DATA_BYTES,
                GridDepth::default(),
            )
            .unwrap();
            // The table's 3,751 disks for 8+3 with IDR is 341 arrays; ceil(2,720 / 8) = 340 arrays
            // (3,740 disks), which every other row's rule gives. Its MTTDL matches 340 arrays.
            let disks = if (layout.to_string().as_str(), idr) == ("8+3", true) {
                3_740
            } else {
                disks
            };
            assert_eq!(plan.disks, disks, "{layout} idr={idr}: disks");
            let error = plan.mttdl_hours / mttdl - 1.0;
            assert!(
                error.abs() < 0.01,
                "{layout} idr={idr}: {:.3e} h vs table {mttdl:.3e} h ({:+.2} %)",
                plan.mttdl_hours,
                error * 100.0
            );
        }
    }
}

#[test]
fn ten_petabyte_example_on_6_plus_2_has_427_arrays() {
    let plan = plan_system(
        &"6+2".parse().unwrap(),
        &ModelParams::thesis(false),
        USER_DATA_BYTES,
        GridDepth::default(),
    )
    .unwrap();
    assert_eq!(
        (plan.data_disks_needed, plan.arrays, plan.disks),
        (2_560, 427, 3_416)
    );
    assert!((plan.efficiency_percent - 75.0).abs() < 1e-9);
    let with_idr = plan_system(
        &"6+2".parse().unwrap(),
        &ModelParams::thesis(true),
        USER_DATA_BYTES,
        GridDepth::default(),
    )
    .unwrap();
    assert_eq!((with_idr.data_disks_needed, with_idr.arrays), (2_720, 454));
    assert!((with_idr.efficiency_percent - 70.588).abs() < 0.001);
}

#[test]
fn idr_improves_mttdl_about_tenfold_and_more_parity_helps_most() {
    let plan = |layout: &str, idr: bool| {
        plan_system(
            &layout.parse().unwrap(),
            &ModelParams::thesis(idr),
            USER_DATA_BYTES,
            GridDepth::default(),
        )
        .unwrap()
        .mttdl_hours
    };
    let gain = plan("8+2", true) / plan("8+2", false);
    assert!((8.0..12.0).contains(&gain), "IDR gain {gain}");
    assert!(plan("8+3", false) > 1000.0 * plan("8+2", false));
}
