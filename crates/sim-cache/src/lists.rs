//! Doubly linked lists of cached objects in one slab, indexed by dense object number: O(1)
//! insert, remove, move and pop at either end. Each object is in at most one list.

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Node {
    object: u32,
    list: u8,
    prev: u32,
    next: u32,
    size_bytes: u64,
}

/// One list's ends and totals. `head` is the most recently inserted end.
#[derive(Clone, Copy)]
struct Ends {
    head: u32,
    tail: u32,
    bytes: u64,
    len: u64,
}

/// `N` lists over the same slab.
pub(crate) struct Lists<const N: usize> {
    nodes: Vec<Node>,
    free: Vec<u32>,
    /// object → node + 1 (0 = in no list).
    index: Vec<u32>,
    ends: [Ends; N],
}

impl<const N: usize> Lists<N> {
    pub(crate) fn new(objects: usize) -> Lists<N> {
        Lists {
            nodes: Vec::new(),
            free: Vec::new(),
            index: vec![0; objects],
            ends: [Ends {
                head: NIL,
                tail: NIL,
                bytes: 0,
                len: 0,
            }; N],
        }
    }

    /// The list holding `object`, if any.
    pub(crate) fn find(&self, object: u32) -> Option<usize> {
        match self.index[object as usize] {
            0 => None,
            node => Some(self.nodes[node as usize - 1].list as usize),
        }
    }

    pub(crate) fn bytes(&self, list: usize) -> u64 {
        self.ends[list].bytes
    }

    pub(crate) fn is_empty(&self, list: usize) -> bool {
        self.ends[list].len == 0
    }

    /// Inserts `object` (in no list) at the head of `list`.
    pub(crate) fn push_front(&mut self, list: usize, object: u32, size_bytes: u64) {
        debug_assert_eq!(self.index[object as usize], 0, "object already listed");
        let node = Node {
            object,
            list: list as u8,
            prev: NIL,
            next: self.ends[list].head,
            size_bytes,
        };
        let at = match self.free.pop() {
            Some(at) => {
                self.nodes[at as usize] = node;
                at
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        let ends = &mut self.ends[list];
        if ends.head != NIL {
            self.nodes[ends.head as usize].prev = at;
        } else {
            ends.tail = at;
        }
        ends.head = at;
        ends.bytes += size_bytes;
        ends.len += 1;
        self.index[object as usize] = at + 1;
    }

    fn unlink(&mut self, at: u32) -> Node {
        let node = self.nodes[at as usize];
        let ends = &mut self.ends[node.list as usize];
        if node.prev != NIL {
            self.nodes[node.prev as usize].next = node.next;
        } else {
            ends.head = node.next;
        }
        if node.next != NIL {
            self.nodes[node.next as usize].prev = node.prev;
        } else {
            ends.tail = node.prev;
        }
        ends.bytes -= node.size_bytes;
        ends.len -= 1;
        self.index[node.object as usize] = 0;
        self.free.push(at);
        node
    }

    /// Removes `object` from its list: `(list, size)`.
    pub(crate) fn remove(&mut self, object: u32) -> Option<(usize, u64)> {
        match self.index[object as usize] {
            0 => None,
            node => {
                let node = self.unlink(node - 1);
                Some((node.list as usize, node.size_bytes))
            }
        }
    }

    /// Removes the tail (least recently inserted end) of `list`: `(object, size)`.
    pub(crate) fn pop_back(&mut self, list: usize) -> Option<(u32, u64)> {
        let tail = self.ends[list].tail;
        (tail != NIL).then(|| {
            let node = self.unlink(tail);
            (node.object, node.size_bytes)
        })
    }

    /// Removes the head of `list`.
    pub(crate) fn pop_front(&mut self, list: usize) -> Option<(u32, u64)> {
        let head = self.ends[list].head;
        (head != NIL).then(|| {
            let node = self.unlink(head);
            (node.object, node.size_bytes)
        })
    }

    /// Moves `object` (listed) to the head of `list`; returns its size.
    pub(crate) fn move_to_front(&mut self, object: u32, list: usize) -> u64 {
        let (_, size_bytes) = self
            .remove(object)
            .expect("move_to_front of a listed object");
        self.push_front(list, object, size_bytes);
        size_bytes
    }

    /// Gives the listed object `from` the number `to` (not listed), keeping its place.
    pub(crate) fn rename(&mut self, from: u32, to: u32) {
        debug_assert_eq!(self.index[to as usize], 0);
        let at = std::mem::take(&mut self.index[from as usize]);
        if at != 0 {
            self.nodes[at as usize - 1].object = to;
            self.index[to as usize] = at;
        }
    }
}
