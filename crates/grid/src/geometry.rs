//! Roles, parity groups and parity targets of every disk of a grid.

use serde::{Deserialize, Serialize};

use crate::layout::{Layout, LayoutError};

/// What a disk holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A data disk, exported as bucket `bucket`.
    Data {
        /// Bucket number (data disks numbered in disk order from 0).
        bucket: usize,
    },
    /// The parity disk `hP` of horizontal parity group `hpg`.
    HParity {
        /// The horizontal parity group it protects.
        hpg: usize,
    },
    /// The parity disk `vP` of column `column` (last row).
    VParity {
        /// The column (vertical parity group) it protects.
        column: usize,
    },
}

/// A parity group: horizontal group `h` (hPG) or column `c` (vPG).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupId {
    /// Horizontal parity group number `h`, `0..hpgs()`.
    Horizontal(usize),
    /// Vertical parity group (column) number `c`, `0..x`.
    Vertical(usize),
}

/// The three parity disks a write to one data disk must update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ParityTargets {
    /// Parity disk of the data disk's horizontal parity group.
    pub hp: usize,
    /// Vertical parity disk of the data disk's column.
    pub vp: usize,
    /// Vertical parity disk of `hp`'s column (`hp` changes, so its column parity does too).
    pub vhp: usize,
}

/// A data disk added to a grid after `grid init` (a *ragged* grid): it joins horizontal parity group `hpg` and
/// column `column`. Added disks are numbered after the `x·y` disks of the layout, in the order they were added,
/// and their buckets after the layout's buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AddedDisk {
    /// The horizontal parity group (the "row" an operator adds the disk to).
    pub hpg: usize,
    /// The column (vertical parity group).
    pub column: usize,
}

/// A horizontal parity group added to a grid after `grid init` ([`Geometry::with_added_group`]): data disks that
/// were added before (`members`, taken out of their hPGs) and a new parity disk in column `column`, numbered after
/// the disks before it. The group's number is the next hPG number.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AddedGroup {
    /// The added data disks the group protects (disk numbers, each `≥ x·y`), in any order.
    pub members: Vec<usize>,
    /// The column of the group's new parity disk (none of the members may be in it).
    pub column: usize,
}

/// One step of a grid's growth, in the order the disks were numbered: each step adds exactly one disk.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Growth {
    /// A data disk ([`Geometry::with_added_disk`]).
    Disk(AddedDisk),
    /// A parity group and its new parity disk ([`Geometry::with_added_group`]).
    Group(AddedGroup),
}

/// Marker in [`Geometry::disk_groups`] for "no horizontal group" (a `vP`).
pub(crate) const NO_GROUP: u16 = u16::MAX;

/// The geometry of one grid: which disk plays which role, and which disks form
/// each parity group. Immutable once built; cheap to share.
///
/// Numbering: disk = row·x + column. The last row holds the vertical parity disks.
/// The `x·(y−1)` upper disks, in disk order, are cut into consecutive horizontal
/// parity groups of `hn + hk` disks (a group wraps from the end of one row into
/// the next); the last disk of each group is its `hP`. Data disks are buckets
/// 0, 1, 2, … in disk order.
///
/// A grown grid ([`Geometry::grown`]) adds data disks numbered from `x·y` on, each a member of one hPG and one
/// column ([`AddedDisk`]); groups then differ in size (a ragged grid). A group's parity disk stays its last member.
/// An added parity group ([`Geometry::with_added_group`]) takes added data disks out of their hPGs into a new hPG
/// whose parity disk is a new disk; hPG numbers of the layout and of earlier groups do not change.
#[derive(Clone, Debug)]
pub struct Geometry {
    layout: Layout,
    /// Per added disk (index `disk − x·y`): a data disk's hPG (as added) and column; a new group's parity disk: its
    /// hPG and column.
    added: Vec<AddedDisk>,
    /// The parity groups added, in order; group `i` is hPG `hpgs() − groups.len() + i`.
    groups: Vec<AddedGroup>,
    /// Per added disk (index `disk − x·y`): its drawing row, `y + ` the number of disks added to its column before it.
    added_rows: Vec<usize>,
    roles: Vec<Role>,
    bucket_disks: Vec<usize>,
    disk_buckets: Vec<Option<usize>>,
    data_disks: Vec<usize>,
    parity_disks: Vec<usize>,
    /// Members of each hPG in disk order, its `hP` last (added disks just before it).
    hpg_members: Vec<Vec<usize>>,
    /// Members of each column in disk order, its `vP` last (added disks just before it).
    column_members: Vec<Vec<usize>>,
    /// Per disk: dense group numbers `[hpg or NO_GROUP, hpgs + column]`, for the
    /// peel decoder.
    pub(crate) disk_groups: Vec<[u16; 2]>,
}

impl Geometry {
    /// Build the geometry of a layout, after [`Layout::validate`] and a check
    /// that no two members of a horizontal parity group share a column.
    pub fn new(layout: Layout) -> Result<Geometry, LayoutError> {
        layout.validate()?;
        Self::build(layout)
    }

    /// The geometry of `layout` grown by the data disks `added` (in the order they were added). Each added disk
    /// must name an existing hPG and column, and its column must not hold another member of its hPG (so every
    /// set of at most 3 failed disks stays recoverable, see the crate doc).
    pub fn grown(layout: Layout, added: &[AddedDisk]) -> Result<Geometry, LayoutError> {
        let mut geometry = Geometry::new(layout)?;
        for &disk in added {
            geometry = geometry.with_added_disk(disk)?;
        }
        Ok(geometry)
    }

    /// This geometry with one more data disk in hPG `disk.hpg` and column `disk.column` (see [`Geometry::grown`]).
    pub fn with_added_disk(&self, disk: AddedDisk) -> Result<Geometry, LayoutError> {
        let layout = self.layout.to_string();
        let AddedDisk { hpg, column } = disk;
        if hpg >= self.hpgs() || column >= self.layout.x {
            return Err(LayoutError::NoSuchGroup {
                layout,
                hpg,
                column,
                hpgs: self.hpgs(),
                columns: self.layout.x,
            });
        }
        if self.disks() >= Layout::MAX_DISKS {
            return Err(LayoutError::TooLarge {
                layout,
                disks: self.disks() + 1,
                max: Layout::MAX_DISKS,
            });
        }
        if let Some(&other) = self.hpg_members[hpg]
            .iter()
            .find(|&&member| self.column(member) == column)
        {
            return Err(LayoutError::ColumnTaken {
                layout,
                hpg,
                column,
                disk: other,
            });
        }
        let index = self.disks();
        let mut grown = self.clone();
        let bucket = grown.bucket_disks.len();
        grown.roles.push(Role::Data { bucket });
        grown.bucket_disks.push(index);
        grown.disk_buckets.push(Some(bucket));
        grown.data_disks.push(index);
        let before_last = |members: &mut Vec<usize>| {
            let at = members.len() - 1;
            members.insert(at, index);
        };
        before_last(&mut grown.hpg_members[hpg]);
        before_last(&mut grown.column_members[column]);
        let row = self.layout.y
            + self
                .added
                .iter()
                .filter(|earlier| earlier.column == column)
                .count();
        grown.added.push(disk);
        grown.added_rows.push(row);
        grown
            .disk_groups
            .push([hpg as u16, (self.hpgs() + column) as u16]);
        Ok(grown)
    }

    /// The geometry of `layout` grown by `steps`, in the order their disks were numbered (disk `x·y + i` is the
    /// disk step `i` adds).
    pub fn grown_by(layout: Layout, steps: &[Growth]) -> Result<Geometry, LayoutError> {
        let mut geometry = Geometry::new(layout)?;
        for step in steps {
            geometry = match step {
                Growth::Disk(disk) => geometry.with_added_disk(*disk)?,
                Growth::Group(group) => geometry.with_added_group(group)?,
            };
        }
        Ok(geometry)
    }

    /// This geometry with one more horizontal parity group, hPG number `hpgs()`: `group.members` (data disks added
    /// after `grid init`) leave their hPGs and join it, and a new disk, numbered `disks()`, becomes its parity `hP`
    /// in column `group.column` (drawn below that column like an added data disk). The members keep their buckets
    /// and columns. Refused unless: at least one member; every member is a distinct added data disk; no two members
    /// and the new parity share a column; every hPG a member leaves keeps at least one data disk. So no hPG has two
    /// disks in one column and every set of at most 3 failed disks stays recoverable (see the crate doc).
    pub fn with_added_group(&self, group: &AddedGroup) -> Result<Geometry, LayoutError> {
        let refuse = |reason: String| LayoutError::GroupRefused {
            layout: self.layout.to_string(),
            reason,
        };
        let AddedGroup { members, column } = group;
        let column = *column;
        if members.is_empty() {
            return Err(refuse("a group needs at least one data disk".into()));
        }
        if column >= self.layout.x {
            return Err(refuse(format!(
                "column {column} does not exist (the grid has {} columns)",
                self.layout.x
            )));
        }
        if self.disks() >= Layout::MAX_DISKS {
            return Err(LayoutError::TooLarge {
                layout: self.layout.to_string(),
                disks: self.disks() + 1,
                max: Layout::MAX_DISKS,
            });
        }
        let base = self.layout.disks();
        let mut used = vec![None; self.layout.x];
        used[column] = Some(self.disks());
        for &member in members {
            if member < base
                || member >= self.disks()
                || !matches!(self.role(member), Role::Data { .. })
            {
                return Err(refuse(format!(
                    "disk {member} is not a data disk added after `grid init` (disks {base}.. of this grid;                      only those can move into a new group)"
                )));
            }
            if let Some(other) = used[self.column(member)].replace(member) {
                return Err(refuse(if other == member {
                    format!("disk {member} is named twice")
                } else if other == self.disks() {
                    format!("disk {member} is in column {column}, the new parity disk's column")
                } else {
                    format!(
                        "disks {other} and {member} are both in column {}; a group has at most one disk per column",
                        self.column(member)
                    )
                }));
            }
        }
        let hpg = self.hpgs();
        let index = self.disks();
        let mut grown = self.clone();
        for (h, list) in grown.hpg_members.iter_mut().enumerate() {
            list.retain(|m| !members.contains(m));
            if list.len() < 2 {
                return Err(refuse(format!(
                    "horizontal parity group {h} would be left without a data disk"
                )));
            }
        }
        let mut list = members.clone();
        list.sort_unstable();
        list.push(index);
        grown.hpg_members.push(list);
        grown.roles.push(Role::HParity { hpg });
        grown.disk_buckets.push(None);
        grown.parity_disks.push(index);
        let members_of_column = &mut grown.column_members[column];
        members_of_column.insert(members_of_column.len() - 1, index);
        let row = self.layout.y
            + self
                .added
                .iter()
                .filter(|earlier| earlier.column == column)
                .count();
        grown.added.push(AddedDisk { hpg, column });
        grown.added_rows.push(row);
        grown.groups.push(group.clone());
        // Dense group numbers: the columns come after the hPGs, so they all shift by one.
        let hpgs = grown.hpgs();
        let mut disk_groups = vec![[NO_GROUP, 0]; grown.disks()];
        for (disk, groups) in disk_groups.iter_mut().enumerate() {
            groups[1] = (hpgs + grown.column(disk)) as u16;
        }
        for (h, list) in grown.hpg_members.iter().enumerate() {
            for &m in list {
                disk_groups[m][0] = h as u16;
            }
        }
        grown.disk_groups = disk_groups;
        Ok(grown)
    }

    /// The parity groups added after `grid init`, in order: group `i` is hPG `hpgs() − added_groups().len() + i`.
    pub fn added_groups(&self) -> &[AddedGroup] {
        &self.groups
    }

    /// The hPG number of added group `i` (see [`Geometry::added_groups`]).
    pub fn added_group_hpg(&self, i: usize) -> usize {
        self.hpgs() - self.groups.len() + i
    }

    /// The growth steps that give this geometry from its layout ([`Geometry::grown_by`]).
    pub fn growth(&self) -> Vec<Growth> {
        let mut groups = self.groups.iter();
        let base = self.layout.disks();
        self.added
            .iter()
            .enumerate()
            .map(|(i, disk)| match self.roles[base + i] {
                Role::Data { .. } => Growth::Disk(*disk),
                _ => Growth::Group(
                    groups
                        .next()
                        .expect("one group per added parity disk")
                        .clone(),
                ),
            })
            .collect()
    }

    /// The columns a disk added to hPG `hpg` may go to: those without a member of the group. Panics if `hpg` is
    /// out of range (a caller bug).
    pub fn free_columns(&self, hpg: usize) -> Vec<usize> {
        let members = &self.hpg_members[hpg];
        (0..self.layout.x)
            .filter(|&column| members.iter().all(|&m| self.column(m) != column))
            .collect()
    }

    /// The disks added after `grid init`, in the order they were added (disk `x·y + i` is `added()[i]`): a data
    /// disk's hPG as it was added (an added group may have moved it since) and column; an added group's parity
    /// disk: the group's hPG and column.
    pub fn added(&self) -> &[AddedDisk] {
        &self.added
    }

    /// Version of the geometry: 0 as laid out by `grid init`, +1 for every disk added since (a data disk, or the
    /// parity disk of an added group).
    pub fn version(&self) -> u64 {
        self.added.len() as u64
    }

    /// The layout, and the disks and groups added to it: `8x6:4+1`, `8x6:4+1 +1 disk (hPG 0 col 5)`, or with a
    /// group `8x6:4+1 +2 disks (hPG 0 col 5, hPG 0 col 6) +1 group (hPG 8: disks 48, 49, hP 50 col 0)`.
    pub fn describe(&self) -> String {
        if self.added.is_empty() {
            return self.layout.to_string();
        }
        let base = self.layout.disks();
        let disks: Vec<String> = self
            .added
            .iter()
            .enumerate()
            .filter(|(i, _)| matches!(self.roles[base + i], Role::Data { .. }))
            .map(|(_, a)| format!("hPG {} col {}", a.hpg, a.column))
            .collect();
        let mut text = format!(
            "{} +{} disk{} ({})",
            self.layout,
            disks.len(),
            if disks.len() == 1 { "" } else { "s" },
            disks.join(", ")
        );
        if !self.groups.is_empty() {
            let groups: Vec<String> = self
                .groups
                .iter()
                .enumerate()
                .map(|(i, group)| {
                    let hpg = self.added_group_hpg(i);
                    let mut members = group.members.clone();
                    members.sort_unstable();
                    let members: Vec<String> = members.iter().map(usize::to_string).collect();
                    format!(
                        "hPG {hpg}: disks {}, hP {} col {}",
                        members.join(", "),
                        self.group_parity(GroupId::Horizontal(hpg)),
                        group.column
                    )
                })
                .collect();
            text.push_str(&format!(
                " +{} group{} ({})",
                groups.len(),
                if groups.len() == 1 { "" } else { "s" },
                groups.join("; ")
            ));
        }
        text
    }

    /// The construction proper; assumes the sizes are sane but checks the
    /// column rule itself (so the check is tested with layouts `validate` refuses).
    fn build(layout: Layout) -> Result<Geometry, LayoutError> {
        let Layout { x, y, .. } = layout;
        let disks = layout.disks();
        let group = layout.hpg_size();
        let upper = x * (y - 1);
        let hpgs = upper / group;
        assert!(
            disks <= Layout::MAX_DISKS && hpgs * group == upper && hpgs + x <= Layout::MAX_DISKS,
            "build() needs a validated layout (the peel decoder sizes its scratch by MAX_DISKS)"
        );

        let mut roles = Vec::with_capacity(disks);
        let mut bucket_disks = Vec::new();
        let mut disk_buckets = Vec::with_capacity(disks);
        let mut disk_groups = Vec::with_capacity(disks);
        for disk in 0..disks {
            let column = disk % x;
            let column_group = (hpgs + column) as u16;
            if disk < upper {
                let hpg = disk / group;
                disk_groups.push([hpg as u16, column_group]);
                if disk % group == group - 1 {
                    roles.push(Role::HParity { hpg });
                    disk_buckets.push(None);
                } else {
                    roles.push(Role::Data {
                        bucket: bucket_disks.len(),
                    });
                    disk_buckets.push(Some(bucket_disks.len()));
                    bucket_disks.push(disk);
                }
            } else {
                roles.push(Role::VParity { column });
                disk_buckets.push(None);
                disk_groups.push([NO_GROUP, column_group]);
            }
        }

        let hpg_members: Vec<Vec<usize>> = (0..upper)
            .collect::<Vec<_>>()
            .chunks(group)
            .map(<[usize]>::to_vec)
            .collect();
        for (hpg, members) in hpg_members.iter().enumerate() {
            let mut used = vec![false; x];
            for &disk in members {
                let column = disk % x;
                if std::mem::replace(&mut used[column], true) {
                    return Err(LayoutError::SharedColumn {
                        layout: layout.to_string(),
                        hpg,
                        column,
                    });
                }
            }
        }
        let column_members: Vec<Vec<usize>> = (0..x)
            .map(|column| (0..y).map(|row| row * x + column).collect())
            .collect();
        let data_disks = bucket_disks.clone();
        let parity_disks = (0..disks)
            .filter(|&disk| disk_buckets[disk].is_none())
            .collect();

        Ok(Geometry {
            layout,
            added: Vec::new(),
            groups: Vec::new(),
            added_rows: Vec::new(),
            roles,
            bucket_disks,
            disk_buckets,
            data_disks,
            parity_disks,
            hpg_members,
            column_members,
            disk_groups,
        })
    }

    /// The layout this geometry was built from.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Number of disks, `x·y` plus the added disks.
    pub fn disks(&self) -> usize {
        self.roles.len()
    }

    /// Number of horizontal parity groups, `x·(y−1) / (hn + hk)`.
    pub fn hpgs(&self) -> usize {
        self.hpg_members.len()
    }

    /// Number of buckets (= data disks), `hpgs · hn` plus the added disks.
    pub fn buckets(&self) -> usize {
        self.bucket_disks.len()
    }

    /// The role of `disk`. Panics if `disk >= disks()` (a caller bug).
    pub fn role(&self, disk: usize) -> Role {
        self.roles[disk]
    }

    /// Column of `disk` (its vertical parity group).
    pub fn column(&self, disk: usize) -> usize {
        self.check_disk(disk);
        match disk.checked_sub(self.layout.disks()) {
            Some(i) => self.added[i].column,
            None => disk % self.layout.x,
        }
    }

    /// Row of `disk`; row `y − 1` holds the vertical parity disks. An added disk is drawn below them: row `y` for
    /// the first disk added to its column, `y + 1` for the second, and so on.
    pub fn row(&self, disk: usize) -> usize {
        self.check_disk(disk);
        match disk.checked_sub(self.layout.disks()) {
            Some(i) => self.added_rows[i],
            None => disk / self.layout.x,
        }
    }

    /// The data disk that holds bucket `bucket`. Panics if `bucket >= buckets()`.
    pub fn bucket_disk(&self, bucket: usize) -> usize {
        self.bucket_disks[bucket]
    }

    /// The bucket on `disk`, or `None` for a parity disk.
    pub fn disk_bucket(&self, disk: usize) -> Option<usize> {
        self.disk_buckets[disk]
    }

    /// All data disks, in bucket order.
    pub fn data_disks(&self) -> &[usize] {
        &self.data_disks
    }

    /// All parity disks (`hP` and `vP`), in disk order.
    pub fn parity_disks(&self) -> &[usize] {
        &self.parity_disks
    }

    /// The parity disks a write to `data_disk` updates. Panics if `data_disk`
    /// is not a data disk (a caller bug).
    pub fn parity_targets(&self, data_disk: usize) -> ParityTargets {
        assert!(
            matches!(self.role(data_disk), Role::Data { .. }),
            "parity_targets({data_disk}): not a data disk but {:?}",
            self.role(data_disk)
        );
        let hpg = self
            .horizontal_group(data_disk)
            .expect("a data disk belongs to a horizontal parity group");
        let hp = self.group_parity(GroupId::Horizontal(hpg));
        let vp = self.group_parity(GroupId::Vertical(self.column(data_disk)));
        let vhp = self.group_parity(GroupId::Vertical(self.column(hp)));
        ParityTargets { hp, vp, vhp }
    }

    /// Members of a group, parity disk last. Panics on a group number out of range.
    pub fn group_members(&self, group: GroupId) -> &[usize] {
        match group {
            GroupId::Horizontal(h) => &self.hpg_members[h],
            GroupId::Vertical(c) => {
                assert!(
                    c < self.layout.x,
                    "column {c} out of range (x = {})",
                    self.layout.x
                );
                &self.column_members[c]
            }
        }
    }

    /// The parity disk of a group (`hP` or `vP`).
    pub fn group_parity(&self, group: GroupId) -> usize {
        *self
            .group_members(group)
            .last()
            .expect("groups are never empty")
    }

    /// The groups `disk` belongs to: a data disk or `hP`: its hPG, then its
    /// column; a `vP`: its column only.
    pub fn groups_of(&self, disk: usize) -> Vec<GroupId> {
        let column = GroupId::Vertical(self.column(disk));
        match self.horizontal_group(disk) {
            Some(hpg) => vec![GroupId::Horizontal(hpg), column],
            None => vec![column],
        }
    }

    /// All groups: the hPGs, then the columns.
    pub fn groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        (0..self.hpgs())
            .map(GroupId::Horizontal)
            .chain((0..self.layout.x).map(GroupId::Vertical))
    }

    /// Usable fraction of the raw capacity with an IDR code of `idr_in` data +
    /// `idr_ik` parity blocks per group: `in/(in+ik) · dn/(dn+dk)` (thesis
    /// §4.3.2). `usable_fraction(1, 0)` is the grid's share alone; `idr_in = 0`
    /// gives 0.
    pub fn usable_fraction(&self, idr_in: usize, idr_ik: usize) -> f64 {
        if idr_in == 0 {
            return 0.0;
        }
        let idr = idr_in as f64 / (idr_in + idr_ik) as f64;
        idr * self.buckets() as f64 / self.disks() as f64
    }

    fn horizontal_group(&self, disk: usize) -> Option<usize> {
        match self.disk_groups[disk][0] {
            NO_GROUP => None,
            hpg => Some(hpg as usize),
        }
    }

    fn check_disk(&self, disk: usize) {
        assert!(
            disk < self.disks(),
            "disk {disk} out of range (grid of {} disks)",
            self.disks()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REFERENCE: [&str; 4] = ["8x6:4+1", "12x6:9+1", "8x8:6+1", "24x8:6+1"];

    fn geometry(text: &str) -> Geometry {
        Geometry::new(text.parse().unwrap()).unwrap()
    }

    #[test]
    fn eight_by_six_matches_thesis_figure_4_2_counts() {
        let g = geometry("8x6:4+1");
        assert_eq!(g.disks(), 48);
        assert_eq!(g.buckets(), 32); // dn = 32
        assert_eq!(g.parity_disks().len(), 16); // dk = 16
        assert_eq!(g.hpgs(), 8);
        // hPG 1 wraps from row 0 into row 1: disks 5, 6, 7, 8, 9 with hP = 9.
        assert_eq!(g.group_members(GroupId::Horizontal(1)), &[5, 6, 7, 8, 9]);
        assert_eq!(g.role(9), Role::HParity { hpg: 1 });
        assert_eq!(g.role(8), Role::Data { bucket: 7 });
        assert_eq!(g.role(40), Role::VParity { column: 0 });
        assert_eq!(
            g.group_members(GroupId::Vertical(3)),
            &[3, 11, 19, 27, 35, 43]
        );
        assert_eq!(
            g.groups_of(9),
            vec![GroupId::Horizontal(1), GroupId::Vertical(1)]
        );
        assert_eq!(g.groups_of(43), vec![GroupId::Vertical(3)]);
        assert_eq!(
            g.groups_of(8),
            vec![GroupId::Horizontal(1), GroupId::Vertical(0)]
        );
        assert_eq!(
            g.parity_targets(8),
            ParityTargets {
                hp: 9,
                vp: 40,
                vhp: 41
            }
        );
        assert_eq!((g.row(43), g.column(43)), (5, 3));
    }

    #[test]
    fn every_disk_has_exactly_its_groups_and_roles_are_consistent() {
        for text in REFERENCE {
            let g = geometry(text);
            let layout = g.layout();
            assert_eq!(g.buckets(), g.hpgs() * layout.hn, "{text}");
            assert_eq!(g.data_disks().len() + g.parity_disks().len(), g.disks());
            for disk in 0..g.disks() {
                let groups = g.groups_of(disk);
                for &group in &groups {
                    assert!(
                        g.group_members(group).contains(&disk),
                        "{text}: {disk} not in {group:?}"
                    );
                }
                let containing: Vec<GroupId> = g
                    .groups()
                    .filter(|&gr| g.group_members(gr).contains(&disk))
                    .collect();
                assert_eq!(containing, groups, "{text}: disk {disk}");
                if disk < layout.disks() {
                    assert_eq!(g.row(disk) * layout.x + g.column(disk), disk);
                }
                match g.role(disk) {
                    Role::Data { bucket } => {
                        assert_eq!(g.bucket_disk(bucket), disk);
                        assert_eq!(g.disk_bucket(disk), Some(bucket));
                        assert_eq!(g.data_disks()[bucket], disk);
                    }
                    Role::HParity { hpg } => {
                        assert_eq!(g.group_parity(GroupId::Horizontal(hpg)), disk);
                        assert_eq!(g.disk_bucket(disk), None);
                    }
                    Role::VParity { column } => {
                        assert_eq!(g.group_parity(GroupId::Vertical(column)), disk);
                        assert_eq!(g.row(disk), layout.y - 1);
                        assert_eq!(g.disk_bucket(disk), None);
                    }
                }
            }
        }
    }

    #[test]
    fn no_two_members_of_a_group_share_a_column() {
        for text in REFERENCE {
            let g = geometry(text);
            for hpg in 0..g.hpgs() {
                let members = g.group_members(GroupId::Horizontal(hpg));
                let mut columns: Vec<usize> = members.iter().map(|&d| g.column(d)).collect();
                columns.sort_unstable();
                columns.dedup();
                assert_eq!(columns.len(), members.len(), "{text} hPG {hpg}");
            }
        }
    }

    #[test]
    fn a_group_wrapping_onto_a_used_column_is_rejected() {
        // 4x6:4+1 cuts its 20 upper disks into 4 groups of 5, wider than a row:
        // validate() refuses it (GroupTooWide) and build() catches the column clash itself.
        let layout = Layout {
            x: 4,
            y: 6,
            hn: 4,
            hk: 1,
        };
        assert!(matches!(
            Geometry::new(layout),
            Err(LayoutError::GroupTooWide { .. })
        ));
        assert!(matches!(
            Geometry::build(layout),
            Err(LayoutError::SharedColumn {
                hpg: 0,
                column: 0,
                ..
            })
        ));
    }

    #[test]
    fn parity_targets_are_hp_vp_and_vertical_parity_of_hp_column() {
        for text in REFERENCE {
            let g = geometry(text);
            for &disk in g.data_disks() {
                let t = g.parity_targets(disk);
                let groups = g.groups_of(disk);
                assert_eq!(t.hp, g.group_parity(groups[0]));
                assert_eq!(t.vp, g.group_parity(groups[1]));
                assert_eq!(
                    g.role(t.vhp),
                    Role::VParity {
                        column: g.column(t.hp)
                    }
                );
                assert_ne!(
                    t.vp, t.vhp,
                    "{text}: disk {disk} shares a column with its hP"
                );
            }
        }
    }

    #[test]
    fn an_added_disk_joins_one_hpg_and_one_column_before_their_parity() {
        let base = geometry("8x6:4+1");
        assert_eq!(base.free_columns(0), vec![5, 6, 7]);
        let g = base
            .with_added_disk(AddedDisk { hpg: 0, column: 5 })
            .unwrap();
        assert_eq!((g.disks(), g.buckets(), g.version()), (49, 33, 1));
        assert_eq!(g.role(48), Role::Data { bucket: 32 });
        assert_eq!(g.bucket_disk(32), 48);
        assert_eq!((g.row(48), g.column(48)), (6, 5));
        assert_eq!(
            g.group_members(GroupId::Horizontal(0)),
            &[0, 1, 2, 3, 48, 4]
        );
        assert_eq!(
            g.group_members(GroupId::Vertical(5)),
            &[5, 13, 21, 29, 37, 48, 45]
        );
        assert_eq!(
            g.parity_targets(48),
            ParityTargets {
                hp: 4,
                vp: 45,
                vhp: 44
            }
        );
        assert_eq!(g.free_columns(0), vec![6, 7]);
        assert_eq!(g.describe(), "8x6:4+1 +1 disk (hPG 0 col 5)");
        // A second disk in the same column is drawn one row lower.
        let g = g.with_added_disk(AddedDisk { hpg: 3, column: 5 }).unwrap();
        assert_eq!((g.row(49), g.column(49)), (7, 5));
        assert!(matches!(
            g.with_added_disk(AddedDisk { hpg: 0, column: 2 }),
            Err(LayoutError::ColumnTaken {
                hpg: 0,
                column: 2,
                disk: 2,
                ..
            })
        ));
        assert!(matches!(
            g.with_added_disk(AddedDisk { hpg: 0, column: 5 }),
            Err(LayoutError::ColumnTaken { disk: 48, .. })
        ));
        assert!(matches!(
            g.with_added_disk(AddedDisk { hpg: 8, column: 5 }),
            Err(LayoutError::NoSuchGroup { hpgs: 8, .. })
        ));
        let same = Geometry::grown(
            base.layout(),
            &[
                AddedDisk { hpg: 0, column: 5 },
                AddedDisk { hpg: 3, column: 5 },
            ],
        )
        .unwrap();
        assert_eq!(same.added(), g.added());
        assert_eq!(same.disk_groups, g.disk_groups);
    }

    #[test]
    fn an_added_group_takes_added_disks_out_of_their_hpg_under_a_new_parity() {
        let base = geometry("8x6:4+1");
        let steps =
            [(0, 5), (0, 6), (0, 7)].map(|(hpg, column)| Growth::Disk(AddedDisk { hpg, column }));
        let wide = Geometry::grown_by(base.layout(), &steps).unwrap();
        assert_eq!(
            wide.group_members(GroupId::Horizontal(0)),
            &[0, 1, 2, 3, 48, 49, 50, 4]
        );
        let group = AddedGroup {
            members: vec![50, 48, 49],
            column: 0,
        };
        let g = wide.with_added_group(&group).unwrap();
        assert_eq!(
            (g.disks(), g.buckets(), g.hpgs(), g.version()),
            (52, 35, 9, 4)
        );
        assert_eq!(g.role(51), Role::HParity { hpg: 8 });
        assert_eq!(g.group_members(GroupId::Horizontal(0)), &[0, 1, 2, 3, 4]);
        assert_eq!(g.group_members(GroupId::Horizontal(8)), &[48, 49, 50, 51]);
        assert_eq!(
            g.group_members(GroupId::Vertical(0)),
            &[0, 8, 16, 24, 32, 51, 40]
        );
        assert_eq!((g.row(51), g.column(51)), (6, 0));
        assert_eq!(g.role(48), Role::Data { bucket: 32 });
        assert_eq!(
            g.parity_targets(49),
            ParityTargets {
                hp: 51,
                vp: 46,
                vhp: 40
            }
        );
        assert_eq!(
            g.groups_of(51),
            vec![GroupId::Horizontal(8), GroupId::Vertical(0)]
        );
        assert!(g.parity_disks().contains(&51));
        assert_eq!(g.added_groups(), std::slice::from_ref(&group));
        assert_eq!(g.added_group_hpg(0), 8);
        assert_eq!(
            g.describe(),
            "8x6:4+1 +3 disks (hPG 0 col 5, hPG 0 col 6, hPG 0 col 7) +1 group (hPG 8: disks 48, 49, 50, hP 51 col 0)"
        );
        // The steps reproduce it, dense group numbers included; a disk may join the new group afterwards.
        let again = Geometry::grown_by(base.layout(), &g.growth()).unwrap();
        assert_eq!(again.disk_groups, g.disk_groups);
        assert_eq!(again.describe(), g.describe());
        let more = g.with_added_disk(AddedDisk { hpg: 8, column: 1 }).unwrap();
        assert_eq!(
            more.group_members(GroupId::Horizontal(8)),
            &[48, 49, 50, 52, 51]
        );
        for disk in 0..g.disks() {
            for group in g.groups_of(disk) {
                assert!(g.group_members(group).contains(&disk), "{disk} {group:?}");
            }
        }
        // Refusals: a layout disk, a parity disk, two members in one column, the parity's column taken, nothing.
        let refused = |members: Vec<usize>, column: usize| {
            matches!(
                wide.with_added_group(&AddedGroup { members, column }),
                Err(LayoutError::GroupRefused { .. })
            )
        };
        assert!(refused(vec![3, 48], 0));
        assert!(refused(vec![48, 48], 0));
        assert!(refused(vec![48, 49], 5));
        assert!(refused(vec![], 0));
        assert!(refused(vec![48], 8));
        let same_column = Geometry::grown_by(
            base.layout(),
            &[(0, 5), (3, 5)].map(|(hpg, column)| Growth::Disk(AddedDisk { hpg, column })),
        )
        .unwrap();
        assert!(matches!(
            same_column.with_added_group(&AddedGroup {
                members: vec![48, 49],
                column: 0
            }),
            Err(LayoutError::GroupRefused { .. })
        ));
        // Taking every data disk of an added group would leave it empty; with one more disk it is allowed.
        assert!(more
            .with_added_group(&AddedGroup {
                members: vec![48, 49, 50],
                column: 3
            })
            .is_ok());
        assert!(matches!(
            g.with_added_group(&AddedGroup {
                members: vec![48, 49, 50],
                column: 3
            }),
            Err(LayoutError::GroupRefused { .. })
        ));
    }

    #[test]
    fn usable_fractions_match_the_thesis() {
        let percent = |text: &str| (geometry(text).usable_fraction(16, 1) * 1000.0).round() / 10.0;
        assert_eq!(percent("12x6:9+1"), 70.6);
        assert_eq!(percent("8x8:6+1"), 70.6); // Table 4.3
        assert_eq!(percent("24x8:6+1"), 70.6); // Table 4.4, ID 10
        assert_eq!(percent("24x8:13+1"), 76.5); // Table 4.4, ID 9
        assert_eq!(percent("38x5:7+1"), 65.9); // Table 4.4, ID 8
        assert_eq!(percent("8x6:4+1"), 62.7);
        assert_eq!(geometry("8x6:4+1").usable_fraction(1, 0), 32.0 / 48.0);
        assert_eq!(geometry("8x6:4+1").usable_fraction(0, 1), 0.0);
    }
}
