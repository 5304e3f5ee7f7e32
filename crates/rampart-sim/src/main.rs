//! `rampart-sim`: the scenarios and the report come next; for now the engine is a library.

fn main() {
    eprintln!("rampart-sim: no scenarios yet");
}
