//! The planner follows a grid with an added parity group (`grid add-group`): its fatal-set counts equal the
//! exhaustive enumeration, no set of at most 3 failures is fatal, and moving the added disks of a widened row into
//! a row of their own lowers the fatal 4-sets and raises the grid's MTTDL.

use permafrost_grid::{AddedDisk, AddedGroup, Geometry, Growth};
use permafrost_plan::fatal;
use permafrost_plan::{grid_reliability, GridDepth, ModelParams};

#[test]
fn fatal_counts_and_mttdl_follow_an_added_group() {
    let layout = "8x6:4+1".parse().unwrap();
    let widened: Vec<Growth> = [(2, 7), (2, 0), (2, 1)]
        .map(|(hpg, column)| Growth::Disk(AddedDisk { hpg, column }))
        .to_vec();
    let wide = Geometry::grown_by(layout, &widened).unwrap();
    let grouped = wide
        .with_added_group(&AddedGroup {
            members: vec![48, 49, 50],
            column: 2,
        })
        .unwrap();
    for (name, grid) in [("widened", &wide), ("grouped", &grouped)] {
        let fast = fatal::count(grid, 5);
        let slow = fatal::exhaustive(grid, 5);
        assert_eq!(fast.unrecoverable, slow.unrecoverable, "{name}");
        assert!(
            fast.unrecoverable[..4].iter().all(|&n| n == 0),
            "{name}: every ≤3 failure is recoverable"
        );
        assert_eq!(fast.unrecoverable[4], grid.fatal_pattern_count(), "{name}");
    }
    assert!(grouped.fatal_pattern_count() < wide.fatal_pattern_count());
    let params = ModelParams::thesis(true);
    let depth = GridDepth(5);
    let before = grid_reliability(&wide, &params, depth).unwrap();
    let after = grid_reliability(&grouped, &params, depth).unwrap();
    println!(
        "MTTDL of one grid: 8x6:4+1 with hPG 2 widened to 7+1 {:.3e} h ({} fatal 4-sets), with the three disks in \
         a row of their own {:.3e} h ({} fatal 4-sets)",
        before.mttdl_hours,
        wide.fatal_pattern_count(),
        after.mttdl_hours,
        grouped.fatal_pattern_count()
    );
    assert!(after.mttdl_hours > before.mttdl_hours);
    assert_eq!(after.disks, 52);
}
