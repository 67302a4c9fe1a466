//! Inode numbers: stable without a table of every entry.
//!
//! An entry's inode number is a hash of its path (`bucket`, key), so the same name gets the same number after a
//! `forget`, a remount or a restart, and a listing of a million entries needs no table. Only the inodes the
//! kernel holds (looked up and not yet forgotten) are kept in memory, with their lookup counts: the kernel asks
//! for an inode by number, and a renamed entry keeps its number while the kernel knows it (so `rename` keeps
//! `st_ino`, as POSIX wants). A hash that collides with a live inode of another path is probed onward.

use std::collections::HashMap;

/// The root directory (the buckets).
pub const ROOT: u64 = 1;

/// Where an inode sits in the namespace. The root has `bucket == ""`; a bucket's top directory `key == ""`;
/// another directory's key is its prefix ending with `/`; a file's key is the object key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodePath {
    pub bucket: String,
    pub key: String,
}

impl NodePath {
    pub fn root() -> NodePath {
        NodePath {
            bucket: String::new(),
            key: String::new(),
        }
    }

    pub fn is_root(&self) -> bool {
        self.bucket.is_empty()
    }

    /// A bucket's top directory.
    pub fn is_bucket(&self) -> bool {
        !self.bucket.is_empty() && self.key.is_empty()
    }

    pub fn is_dir(&self) -> bool {
        self.key.is_empty() || self.key.ends_with('/')
    }

    /// The child `name` of this directory, a directory or a file.
    pub fn child(&self, name: &str, dir: bool) -> NodePath {
        if self.is_root() {
            return NodePath {
                bucket: name.to_string(),
                key: String::new(),
            };
        }
        let slash = if dir { "/" } else { "" };
        NodePath {
            bucket: self.bucket.clone(),
            key: format!("{}{name}{slash}", self.key),
        }
    }

    /// The key without a trailing `/` (what the catalog's `fs_*` methods call a path).
    pub fn path(&self) -> &str {
        self.key.strip_suffix('/').unwrap_or(&self.key)
    }

    /// Whether `self` is `dir` or lies under it.
    fn within(&self, dir: &NodePath) -> bool {
        self.bucket == dir.bucket && self.key.starts_with(&dir.key)
    }
}

impl std::fmt::Display for NodePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "/{}/{}", self.bucket, self.key)
    }
}

#[derive(Debug)]
struct Live {
    path: NodePath,
    lookups: u64,
    /// Unlinked or replaced while the kernel still holds it: no name leads to it any more.
    detached: bool,
}

/// The inodes the kernel holds.
#[derive(Debug, Default)]
pub struct Inodes {
    live: HashMap<u64, Live>,
    by_path: HashMap<NodePath, u64>,
}

fn hash_of(path: &NodePath) -> u64 {
    let mut hasher = blake3::Hasher::new();
    hasher.update(path.bucket.as_bytes());
    hasher.update(&[0]);
    hasher.update(path.key.as_bytes());
    let h = u64::from_le_bytes(
        hasher.finalize().as_bytes()[..8]
            .try_into()
            .expect("8 bytes"),
    );
    // 0 is no inode, 1 the root.
    h.max(ROOT + 1)
}

impl Inodes {
    /// The inode number of `path`: its live number, else its hash (probed past live inodes of other paths).
    /// Does not make it live.
    pub fn ino_of(&self, path: &NodePath) -> u64 {
        if path.is_root() {
            return ROOT;
        }
        if let Some(&ino) = self.by_path.get(path) {
            return ino;
        }
        let mut ino = hash_of(path);
        while self.live.contains_key(&ino) {
            ino = ino.wrapping_add(1).max(ROOT + 1);
        }
        ino
    }

    /// `path` was handed to the kernel once more (a lookup, a create, a readdirplus entry): its inode number.
    pub fn remember(&mut self, path: &NodePath) -> u64 {
        if path.is_root() {
            return ROOT;
        }
        let ino = self.ino_of(path);
        let live = self.live.entry(ino).or_insert_with(|| Live {
            path: path.clone(),
            lookups: 0,
            detached: false,
        });
        live.lookups += 1;
        self.by_path.insert(path.clone(), ino);
        ino
    }

    /// The kernel dropped `n` references to `ino`.
    pub fn forget(&mut self, ino: u64, n: u64) {
        let Some(live) = self.live.get_mut(&ino) else {
            return;
        };
        live.lookups = live.lookups.saturating_sub(n);
        if live.lookups == 0 {
            let live = self.live.remove(&ino).expect("present");
            if !live.detached && self.by_path.get(&live.path) == Some(&ino) {
                self.by_path.remove(&live.path);
            }
        }
    }

    /// The path of a live inode and whether it is detached (no longer reachable by name).
    pub fn path(&self, ino: u64) -> Option<(NodePath, bool)> {
        if ino == ROOT {
            return Some((NodePath::root(), false));
        }
        self.live.get(&ino).map(|l| (l.path.clone(), l.detached))
    }

    /// The live inode of `path`, if the kernel holds one.
    pub fn live_ino(&self, path: &NodePath) -> Option<u64> {
        self.by_path.get(path).copied()
    }

    /// `path` (and, for a directory, everything under it) no longer has a name.
    pub fn detach(&mut self, path: &NodePath) {
        let inos: Vec<u64> = self
            .live
            .iter()
            .filter(|(_, l)| {
                !l.detached && (l.path == *path || (path.is_dir() && l.path.within(path)))
            })
            .map(|(&ino, _)| ino)
            .collect();
        for ino in inos {
            let live = self.live.get_mut(&ino).expect("listed");
            live.detached = true;
            self.by_path.remove(&live.path.clone());
        }
    }

    /// `from` was renamed to `to` (both files, or both directories): live inodes at and under `from` move along
    /// and keep their numbers; live inodes at and under `to` (replaced) are detached.
    pub fn rename(&mut self, from: &NodePath, to: &NodePath) {
        self.detach(to);
        let moved: Vec<u64> = self
            .live
            .iter()
            .filter(|(_, l)| {
                !l.detached && (l.path == *from || (from.is_dir() && l.path.within(from)))
            })
            .map(|(&ino, _)| ino)
            .collect();
        for ino in &moved {
            let old = self.live[ino].path.clone();
            self.by_path.remove(&old);
        }
        for ino in moved {
            let live = self.live.get_mut(&ino).expect("listed");
            let new = NodePath {
                bucket: to.bucket.clone(),
                key: format!("{}{}", to.key, &live.path.key[from.key.len()..]),
            };
            live.path = new.clone();
            self.by_path.insert(new, ino);
        }
    }

    /// Number of live inodes (the memory the table holds).
    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(bucket: &str, key: &str) -> NodePath {
        NodePath {
            bucket: bucket.into(),
            key: key.into(),
        }
    }

    #[test]
    fn the_same_path_gets_the_same_number_after_forget() {
        let mut inodes = Inodes::default();
        let a = inodes.remember(&p("b", "dir/file"));
        inodes.forget(a, 1);
        assert_eq!(inodes.len(), 0);
        assert_eq!(inodes.remember(&p("b", "dir/file")), a);
        assert_ne!(inodes.ino_of(&p("b", "dir/")), a);
        assert_eq!(inodes.ino_of(&NodePath::root()), ROOT);
    }

    #[test]
    fn a_renamed_entry_keeps_its_number_while_live_and_a_collision_is_probed() {
        let mut inodes = Inodes::default();
        let f = inodes.remember(&p("b", "d/f"));
        let child = inodes.remember(&p("b", "d/sub/x"));
        let dir = inodes.remember(&p("b", "d/"));
        inodes.rename(&p("b", "d/"), &p("c", "e/"));
        assert_eq!(inodes.path(f).unwrap().0, p("c", "e/f"));
        assert_eq!(inodes.path(child).unwrap().0, p("c", "e/sub/x"));
        assert_eq!(inodes.path(dir).unwrap().0, p("c", "e/"));
        assert_eq!(inodes.live_ino(&p("b", "d/f")), None);
        // A new entry at the old path hashes to the number the renamed entry still carries: probed onward.
        let again = inodes.remember(&p("b", "d/f"));
        assert_ne!(again, f);
        assert_eq!(inodes.remember(&p("c", "e/f")), f);
    }

    #[test]
    fn a_replaced_target_is_detached_but_stays_until_forgotten() {
        let mut inodes = Inodes::default();
        let tmp = inodes.remember(&p("b", ".f.tmp"));
        let old = inodes.remember(&p("b", "f"));
        inodes.rename(&p("b", ".f.tmp"), &p("b", "f"));
        assert_eq!(inodes.path(old), Some((p("b", "f"), true)));
        assert_eq!(inodes.live_ino(&p("b", "f")), Some(tmp));
        inodes.forget(old, 1);
        assert_eq!(inodes.live_ino(&p("b", "f")), Some(tmp));
        inodes.forget(tmp, 1);
        assert_eq!(inodes.len(), 0);
    }
}
