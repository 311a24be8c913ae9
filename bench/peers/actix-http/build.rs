//! Gives `--version` the locked versions of the peer's main crates, from Cargo.lock.
fn main() {
    println!("cargo:rerun-if-changed=Cargo.lock");
    let lock = std::fs::read_to_string("Cargo.lock").unwrap_or_default();
    let mut line = Vec::new();
    for name in ["actix-http", "tokio-postgres", "sailfish"] {
        let needle = format!("name = \"{name}\"\nversion = \"");
        let version = lock
            .find(&needle)
            .map(|i| &lock[i + needle.len()..])
            .and_then(|rest| rest.split('"').next())
            .unwrap_or("?");
        line.push(format!("{name} {version}"));
    }
    println!("cargo:rustc-env=PEER_VERSIONS={}", line.join(", "));
}
