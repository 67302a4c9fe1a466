//! The record every trace is made of, and the size classes of thesis Table 2.1.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What a request does to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    /// Read the whole object.
    Get,
    /// Write (create or overwrite) the whole object.
    Put,
    /// Delete the object.
    Del,
    /// Give the object a new id ([`Record::target`]); a previous object of that id is replaced.
    Rename,
}

impl Op {
    /// All operations, in the order the format and the statistics list them.
    pub const ALL: [Op; 4] = [Op::Get, Op::Put, Op::Del, Op::Rename];

    /// The name used in the trace format: `GET`, `PUT`, `DEL`, `RENAME`.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Get => "GET",
            Op::Put => "PUT",
            Op::Del => "DEL",
            Op::Rename => "RENAME",
        }
    }

    /// Parses a name of the trace format (also accepts `DELETE`).
    pub fn parse(text: &str) -> Option<Op> {
        match text {
            "GET" => Some(Op::Get),
            "PUT" => Some(Op::Put),
            "DEL" | "DELETE" => Some(Op::Del),
            "RENAME" => Some(Op::Rename),
            _ => None,
        }
    }

    /// Position in [`Op::ALL`], for arrays indexed by operation.
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// When the object of a record is next read (the information Bélády's algorithm needs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum NextAccess {
    /// The trace does not say (compute it with a pass over the trace).
    #[default]
    Unknown,
    /// The object, as this record leaves it, is never read again.
    Never,
    /// The next `GET` of the object (under its id after this record) is at this time, in ms
    /// since the trace's start.
    AtMs(u64),
}

/// One request of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Time the request starts, in milliseconds since the start of the trace.
    pub time_ms: u64,
    /// The operation.
    pub op: Op,
    /// The object's id (for `RENAME`, the id before the rename).
    pub object: u64,
    /// The object's size in bytes (0 when the source does not say, e.g. a `DEL`).
    pub size_bytes: u64,
    /// Who asked (an opaque user id).
    pub user: u32,
    /// The user session the request belongs to (opaque; 0 = unknown).
    pub session: u64,
    /// For `RENAME`: the object's new id. `None` for the other operations.
    pub target: Option<u64>,
    /// When the object is next read, if known.
    pub next_access: NextAccess,
    /// The object's path or data set name, if the trace has one (no tabs or line breaks).
    pub path: Option<String>,
}

impl Record {
    /// A record with the required fields; the optional ones are empty.
    pub fn new(time_ms: u64, op: Op, object: u64, size_bytes: u64) -> Record {
        Record {
            time_ms,
            op,
            object,
            size_bytes,
            user: 0,
            session: 0,
            target: None,
            next_access: NextAccess::Unknown,
            path: None,
        }
    }
}

/// The file-size classes of ECFS (thesis Table 2.1). Bounds are binary (KiB = 1024 bytes), upper
/// bounds inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum SizeClass {
    /// 0 – 512 KiB
    Tiny,
    /// 512 KiB – 1 MiB
    Small,
    /// 1 MiB – 8 MiB
    Medium,
    /// 8 MiB – 48 MiB
    Large,
    /// 48 MiB – 1 GiB
    Huge,
    /// above 1 GiB
    Enormous,
}

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

impl SizeClass {
    /// All classes, smallest first.
    pub const ALL: [SizeClass; 6] = [
        SizeClass::Tiny,
        SizeClass::Small,
        SizeClass::Medium,
        SizeClass::Large,
        SizeClass::Huge,
        SizeClass::Enormous,
    ];

    /// The class of an object of `size_bytes`.
    pub fn of(size_bytes: u64) -> SizeClass {
        match size_bytes {
            s if s <= 512 * KIB => SizeClass::Tiny,
            s if s <= MIB => SizeClass::Small,
            s if s <= 8 * MIB => SizeClass::Medium,
            s if s <= 48 * MIB => SizeClass::Large,
            s if s <= GIB => SizeClass::Huge,
            _ => SizeClass::Enormous,
        }
    }

    /// Exclusive lower and inclusive upper bound in bytes (`u64::MAX` for the last class).
    pub fn bounds_bytes(self) -> (u64, u64) {
        match self {
            SizeClass::Tiny => (0, 512 * KIB),
            SizeClass::Small => (512 * KIB, MIB),
            SizeClass::Medium => (MIB, 8 * MIB),
            SizeClass::Large => (8 * MIB, 48 * MIB),
            SizeClass::Huge => (48 * MIB, GIB),
            SizeClass::Enormous => (GIB, u64::MAX),
        }
    }

    /// The class's name as in the thesis.
    pub fn name(self) -> &'static str {
        match self {
            SizeClass::Tiny => "Tiny",
            SizeClass::Small => "Small",
            SizeClass::Medium => "Medium",
            SizeClass::Large => "Large",
            SizeClass::Huge => "Huge",
            SizeClass::Enormous => "Enormous",
        }
    }

    /// Position in [`SizeClass::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for SizeClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A stable 64-bit hash of a name (FNV-1a), used to turn paths and user names into ids.
pub fn hash_name(name: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in name.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_class_bounds_are_inclusive_above() {
        assert_eq!(SizeClass::of(0), SizeClass::Tiny);
        assert_eq!(SizeClass::of(512 * KIB), SizeClass::Tiny);
        assert_eq!(SizeClass::of(512 * KIB + 1), SizeClass::Small);
        assert_eq!(SizeClass::of(MIB), SizeClass::Small);
        assert_eq!(SizeClass::of(8 * MIB), SizeClass::Medium);
        assert_eq!(SizeClass::of(48 * MIB), SizeClass::Large);
        assert_eq!(SizeClass::of(GIB), SizeClass::Huge);
        assert_eq!(SizeClass::of(GIB + 1), SizeClass::Enormous);
        for class in SizeClass::ALL {
            let (low, high) = class.bounds_bytes();
            assert_eq!(SizeClass::of(high), class);
            if low > 0 {
                assert_eq!(SizeClass::of(low), SizeClass::ALL[class.index() - 1]);
            }
        }
    }

    #[test]
    fn op_names_round_trip() {
        for op in Op::ALL {
            assert_eq!(Op::parse(op.as_str()), Some(op));
        }
        assert_eq!(Op::parse("get"), None);
    }
}
