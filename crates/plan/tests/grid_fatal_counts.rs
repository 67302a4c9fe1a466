//! The planner's fatal-set counts for grids equal the grid crate's exhaustive enumeration, and
//! grid MTTDLs land where thesis Table 4.3 puts them.

use permafrost_grid::{Geometry, Layout};
use permafrost_plan::fatal;
use permafrost_plan::{plan_system, GridDepth, ModelParams, PlanLayout, TIB};

fn geometry(text: &str) -> Geometry {
    Geometry::new(text.parse::<Layout>().unwrap()).unwrap()
}

#[test]
fn fatal_counts_equal_exhaustive_enumeration_on_small_grids_for_every_size() {
    // Small enough to enumerate every failure-set size the planner models.
    for layout in ["6x3:2+1", "4x4:2+1", "6x4:2+1"] {
        let grid = geometry(layout);
        let depth = grid.disks().min(fatal::FAILURES_MAX);
        let fast = fatal::count(&grid, depth);
        let slow = fatal::exhaustive(&grid, depth);
        assert_eq!(fast.unrecoverable, slow.unrecoverable, "{layout}");
    }
}

#[test]
fn fatal_counts_equal_exhaustive_enumeration_on_reference_grids() {
    for (layout, depth) in [("8x6:4+1", 5), ("10x5:7+1", 5), ("12x6:9+1", 4)] {
        let grid = geometry(layout);
        let fast = fatal::count(&grid, depth);
        let slow = fatal::exhaustive(&grid, depth);
        assert_eq!(fast.unrecoverable, slow.unrecoverable, "{layout}");
        assert_eq!(
            fast.unrecoverable[4],
            grid.fatal_pattern_count(),
            "{layout}: b"
        );
        assert!(
            fast.unrecoverable[..4].iter().all(|&n| n == 0),
            "{layout}: every ≤3 failure is recoverable"
        );
    }
}

#[test]
#[ignore = "exhaustive 6-failure enumeration takes minutes"]
fn fatal_counts_equal_exhaustive_enumeration_for_six_failures() {
    let grid = geometry("8x6:4+1");
    assert_eq!(
        fatal::count(&grid, 6).unrecoverable,
        fatal::exhaustive(&grid, 6).unrecoverable
    );
}

#[test]
fn grid_mttdl_is_in_the_range_of_table_4_3_and_above_n_plus_2() {
    let user = 10_240 * TIB as u128;
    // (layout, Table 4.3 with IDR, disks; without IDR, disks)
    for (layout, idr_mttdl, idr_disks, plain_mttdl, plain_disks) in [
        ("8x8:6+1", 3.59e10, 3_648, 3.81e9, 3_456),
        ("12x8:6+1", 3.58e10, 3_648, 3.80e9, 3_456),
    ] {
        let layout: PlanLayout = layout.parse().unwrap();
        for (idr, table, disks) in [
            (true, idr_mttdl, idr_disks),
            (false, plain_mttdl, plain_disks),
        ] {
            let plan = plan_system(
                &layout,
                &ModelParams::thesis(idr),
                user,
                GridDepth::default(),
            )
            .unwrap();
            assert_eq!(plan.disks, disks, "{layout} idr={idr}");
            let ratio = plan.mttdl_hours / table;
            // Ours are about 11x the thesis's: its figures imply ~11x more fatal 4-sets than the
            // engine's geometry has (see docs/plan.md). Guard that relation, not equality.
            assert!(
                (3.0..30.0).contains(&ratio),
                "{layout} idr={idr}: {:.3e} vs {table:.3e}",
                plan.mttdl_hours
            );
            assert!(plan.mttdl_hours > 1e8);
        }
    }
}

#[test]
fn grid_model_depth_six_has_converged() {
    let layout: PlanLayout = "12x8:6+1".parse().unwrap();
    let user = 10_240 * TIB as u128;
    for idr in [false, true] {
        let at = |depth| {
            plan_system(&layout, &ModelParams::thesis(idr), user, GridDepth(depth))
                .unwrap()
                .mttdl_hours
        };
        let (four, five, six) = (at(4), at(5), at(6));
        assert!(
            four <= five && five <= six,
            "a deeper model is never more pessimistic"
        );
        // Depth 5 is within 3 % of depth 6 (the explorer's default); 6 has converged (the
        // thesis's closed-form p_k to depth 20 gives the same value to 4 digits, docs/plan.md).
        assert!(
            six / five - 1.0 < 0.03,
            "idr={idr}: depth 5 {five:.4e}, depth 6 {six:.4e}"
        );
        assert!(
            six / four - 1.0 > 0.5,
            "depth 4 is too shallow: {four:.4e} vs {six:.4e}"
        );
    }
}
