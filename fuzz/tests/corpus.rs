//! Every corpus file through its target, on stable: the seeds, and whatever fuzzing found and
//! was kept (a crash fixed is added here, so it stays fixed).

use std::path::Path;

#[test]
fn every_corpus_file_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut ran = 0;
    for (name, target) in fleet_fuzz::TARGETS {
        let dir = root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no corpus for {name}");
        for f in files {
            let data = std::fs::read(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            let run = std::panic::catch_unwind(|| target(&data));
            assert!(run.is_ok(), "{name}: {} fails its target", f.display());
            ran += 1;
        }
    }
    eprintln!("{ran} corpus files replayed");
}

/// The seeds as committed are the seeds as generated (rewrite them with `--ignored`).
#[test]
fn the_committed_seeds_are_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (target, name, bytes) in fleet_fuzz::seed::seeds() {
        let f = root.join(target).join(&name);
        let on_disk = std::fs::read(&f).unwrap_or_default();
        assert!(
            on_disk == bytes,
            "{} is stale: cargo test -p fleet-fuzz -- --ignored write_seeds",
            f.display()
        );
    }
}

#[test]
#[ignore = "writes fuzz/corpus/*/seed-*"]
fn write_seeds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (target, name, bytes) in fleet_fuzz::seed::seeds() {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join(name), bytes).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The envelope seeds are real traffic: each genuine one is admitted by the receiving gateway
/// (so fuzzing starts past the signature, not at "malformed").
#[test]
fn the_envelope_seeds_are_admitted() {
    use fleet_core::admission::{admit_in, Arrived, SeenSet};
    use fleet_core::signing::Keyring;
    use fleet_core::{HostId, SessionId};
    let publics = [("b", fleet_fuzz::KEY_B)]
        .into_iter()
        .map(|(h, k)| {
            let key = Keyring::new(HostId::new(h), k, &Default::default())
                .unwrap_or_else(|e| panic!("{e}"));
            (HostId::new(h), key.public_key())
        })
        .collect();
    let receiver = Keyring::new(HostId::new("a"), fleet_fuzz::KEY_A, &publics)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut admitted = 0;
    for (target, name, bytes) in fleet_fuzz::seed::seeds() {
        if target != "envelope" || name == "seed-own-signed" {
            continue;
        }
        let (headers, body, key) = fleet_fuzz::decode(&bytes[1..]);
        let host_of = |g: &SessionId| {
            (g.as_str() == "w1" || g.as_str() == "lead-b").then(|| HostId::new("b"))
        };
        let arrived = Arrived {
            headers: &headers,
            body,
            routing_key: &key,
            queue: "q",
        };
        let r = admit_in(
            &receiver,
            arrived,
            fleet_fuzz::NOW_UNIX,
            host_of,
            Some(&mut SeenSet::new(8)),
        );
        assert!(r.is_ok(), "{name}: {r:?}");
        admitted += 1;
    }
    assert_eq!(
        admitted, 15,
        "every kind, and 1.1 presence three times more"
    );
}
