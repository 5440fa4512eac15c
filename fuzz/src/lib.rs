//! Fuzz targets land here with the hostile-input issue (cargo-fuzz, corpus replay in CI).
//! Until then this crate only pins the folder in the workspace.
