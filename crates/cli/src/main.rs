//! `permafrost`: the operator's command line. TODO
fn main() {}
