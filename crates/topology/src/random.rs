//! Seeded random topologies for the property tests and the comparison example: one client, relays
//! joined into a connected mesh, data nodes attached to one or two relays. Capacities and measured use
//! come from small sets so that ties happen (and tie-breaking gets exercised). Same seed, same topology.

use crate::topology::{Role, Topology};

/// Shape of a random topology.
#[derive(Clone, Copy, Debug)]
pub struct RandomShape {
    /// Relays (≥ 1).
    pub relays: usize,
    /// Data nodes.
    pub nodes: usize,
    /// Relay–relay links beyond the spanning ones that keep the relays connected.
    pub extra_links: usize,
    /// Whether relays and the client get `degree_max` limits.
    pub degree_limits: bool,
}

/// splitmix64: a tiny, well-known generator; enough for test inputs.
pub struct SplitMix(pub u64);

impl SplitMix {
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Names used: `client`, `r00`.., `n00`...
pub fn random_topology(seed: u64, shape: RandomShape) -> Topology {
    let mut rng = SplitMix(seed);
    let mut t = Topology::new();
    const CAPACITIES: [f64; 4] = [100.0, 200.0, 1000.0, 10_000.0];
    const USE: [f64; 4] = [0.0, 0.25, 0.5, 0.75];
    let link = |t: &mut Topology, rng: &mut SplitMix, a: &str, b: &str| {
        let cap = CAPACITIES[rng.below(CAPACITIES.len())];
        let used = [
            cap * USE[rng.below(USE.len())],
            cap * USE[rng.below(USE.len())],
        ];
        // A second link for the same pair is skipped (the topology refuses it).
        let _ = t.add_link(a, b, cap, used);
    };
    let client_degree = (shape.degree_limits && rng.below(2) == 0).then_some(1);
    t.add_node("client", Role::Client, client_degree)
        .expect("fresh name");
    let relays: Vec<String> = (0..shape.relays.max(1))
        .map(|i| format!("r{i:02}"))
        .collect();
    for r in &relays {
        let limit = [None, Some(2), Some(3), Some(4), Some(6)][rng.below(5)];
        t.add_node(
            r,
            Role::Relay,
            if shape.degree_limits { limit } else { None },
        )
        .expect("fresh name");
    }
    let nodes: Vec<String> = (0..shape.nodes).map(|i| format!("n{i:02}")).collect();
    for d in &nodes {
        t.add_node(d, Role::Node, None).expect("fresh name");
    }
    for i in 1..relays.len() {
        let j = rng.below(i);
        link(&mut t, &mut rng, &relays[i], &relays[j]);
    }
    for _ in 0..shape.extra_links {
        let (i, j) = (rng.below(relays.len()), rng.below(relays.len()));
        if i != j {
            link(&mut t, &mut rng, &relays[i], &relays[j]);
        }
    }
    for _ in 0..1 + rng.below(2) {
        let r = rng.below(relays.len());
        link(&mut t, &mut rng, "client", &relays[r]);
    }
    for d in &nodes {
        for _ in 0..1 + usize::from(rng.below(10) < 3) {
            let r = rng.below(relays.len());
            link(&mut t, &mut rng, d, &relays[r]);
        }
    }
    t
}
