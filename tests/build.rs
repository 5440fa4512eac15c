//! `cfg(herdr_real)` when `HERDR_BIN` names a herdr at build time: the scenarios that need a
//! real herdr are then compiled to run, and otherwise marked ignored — so a run without one
//! says so in its summary instead of passing them.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(herdr_real)");
    println!("cargo::rerun-if-env-changed=HERDR_BIN");
    if std::env::var_os("HERDR_BIN").is_some_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=herdr_real");
    }
}
