//! `cfg(herdr_real)` when `HERDR_BIN` names a herdr at build time, `cfg(chromium)` when a
//! headless Chromium is installed (`CHROMIUM`, or `chromium` / `chromium-browser` on `PATH`),
//! `cfg(chromedriver)` when chromedriver is on `PATH` too, `cfg(schemathesis)` when schemathesis
//! is on `PATH`, `cfg(claude_code)` when Claude Code is (`CLAUDE_BIN`, or `claude` on `PATH`),
//! `cfg(codex)` when Codex is (`CODEX_BIN`, or `codex` on `PATH`), `cfg(opencode)` likewise
//! (`OPENCODE_BIN`, or `opencode`):
//! the scenarios that need one are then compiled to run, and otherwise marked ignored — so a
//! run without it says so in its summary instead of passing them.

use std::path::Path;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(herdr_real)");
    println!("cargo::rustc-check-cfg=cfg(chromium)");
    println!("cargo::rustc-check-cfg=cfg(schemathesis)");
    println!("cargo::rustc-check-cfg=cfg(chromedriver)");
    println!("cargo::rustc-check-cfg=cfg(claude_code)");
    println!("cargo::rustc-check-cfg=cfg(codex)");
    println!("cargo::rustc-check-cfg=cfg(opencode)");
    println!("cargo::rerun-if-env-changed=OPENCODE_BIN");
    println!("cargo::rerun-if-env-changed=CODEX_BIN");
    println!("cargo::rerun-if-env-changed=CLAUDE_BIN");
    println!("cargo::rerun-if-env-changed=HERDR_BIN");
    println!("cargo::rerun-if-env-changed=CHROMIUM");
    if std::env::var_os("HERDR_BIN").is_some_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=herdr_real");
    }
    for dir in ["/usr/bin", "/usr/local/bin"] {
        println!("cargo::rerun-if-changed={dir}/chromium");
        println!("cargo::rerun-if-changed={dir}/claude");
        println!("cargo::rerun-if-changed={dir}/codex");
        println!("cargo::rerun-if-changed={dir}/opencode");
    }
    if chromium().is_some() {
        println!("cargo::rustc-cfg=chromium");
    }
    if chromium().is_some() && on_path("chromedriver") {
        println!("cargo::rustc-cfg=chromedriver");
    }
    let claude = std::env::var_os("CLAUDE_BIN").filter(|v| !v.is_empty());
    if claude.is_some_and(|c| Path::new(&c).is_file()) || on_path("claude") {
        println!("cargo::rustc-cfg=claude_code");
    }
    let codex = std::env::var_os("CODEX_BIN").filter(|v| !v.is_empty());
    if codex.is_some_and(|c| Path::new(&c).is_file()) || on_path("codex") {
        println!("cargo::rustc-cfg=codex");
    }
    let opencode = std::env::var_os("OPENCODE_BIN").filter(|v| !v.is_empty());
    if opencode.is_some_and(|c| Path::new(&c).is_file()) || on_path("opencode") {
        println!("cargo::rustc-cfg=opencode");
    }
    if on_path("schemathesis") {
        println!("cargo::rustc-cfg=schemathesis");
    }
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

fn chromium() -> Option<String> {
    if let Some(c) = std::env::var_os("CHROMIUM").filter(|v| !v.is_empty()) {
        return Some(c.to_string_lossy().into_owned());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|d| ["chromium", "chromium-browser"].map(|n| d.join(n)))
        .find(|p| Path::new(p).is_file())
        .map(|p| p.to_string_lossy().into_owned())
}
