//! Rebuilds the demo when a migration file is added (the files themselves are tracked by
//! `brisk::migrations!`'s `include_str!`).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
