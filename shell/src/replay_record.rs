//! The replay record kept on disk (DESIGN §8, "replay protection survives restarts"): every
//! forward-path msgId the core admitted (`Output::Remember`), appended and synced before the
//! ack and the inject that follow it, and given back after a restart (`Input::ReplayRecord`),
//! so a captured SEND, ANSWER, BROADCAST or SPAWN replayed within its expiry is refused even
//! by a gateway that has restarted since. Bounded: the file is rewritten with the unexpired
//! entries only whenever it has grown to twice what is live; the core refuses rather than
//! forgets when `seen_capacity` entries are live.

use fleet_core::admission::Remembered;
use fleet_core::MsgId;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

/// Where the driver keeps what the core asks it to remember.
pub trait ReplayRecord {
    /// Keeps `entries` durably, now (`now_unix_ms`: when, for compaction).
    fn keep(&mut self, entries: &[Remembered], now_unix_ms: u64) -> Result<(), String>;
}

/// No disk: single-host mode and tests that do not restart (a restart forgets).
#[derive(Clone, Copy, Debug, Default)]
pub struct InMemory;

impl ReplayRecord for InMemory {
    fn keep(&mut self, _entries: &[Remembered], _now_unix_ms: u64) -> Result<(), String> {
        Ok(())
    }
}

/// The record as a file of lines `<msgId> <scope> <expiresAt>`.
#[derive(Debug)]
pub struct RecordFile {
    path: PathBuf,
    file: File,
    /// What the file holds that may still matter, by (msgId, scope).
    live: BTreeMap<(MsgId, u64), u64>,
    /// Lines in the file now (live or not).
    lines: usize,
    /// When to look for expired entries next (a line count).
    next_check: usize,
}

/// What opening a record found.
#[derive(Debug)]
pub struct Opened {
    pub record: RecordFile,
    /// The unexpired entries, for `Input::ReplayRecord`.
    pub entries: Vec<Remembered>,
    /// Lines that did not parse (a torn last write, or damage): skipped, and said so.
    pub skipped: usize,
}

fn line(e: &Remembered) -> String {
    format!("{} {:016x} {}\n", e.msg, e.scope, e.expires_at)
}

fn parse(l: &str) -> Option<Remembered> {
    let mut parts = l.split(' ');
    let msg: MsgId = parts.next()?.parse().ok()?;
    let scope = u64::from_str_radix(parts.next()?, 16).ok()?;
    let expires_at = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some(Remembered {
        msg,
        scope,
        expires_at,
    })
}

impl RecordFile {
    /// Opens (or creates) the record at `path` and reads what is still unexpired at `now`.
    pub fn open(path: &Path, now_unix_ms: u64) -> Result<Opened, String> {
        let why = |e: std::io::Error| format!("replay record {}: {e}", path.display());
        let mut live = BTreeMap::new();
        let mut skipped = 0;
        if path.exists() {
            let f = File::open(path).map_err(why)?;
            for l in BufReader::new(f).lines() {
                match l.ok().as_deref().and_then(parse) {
                    Some(e) if e.expires_at >= now_unix_ms => {
                        live.insert((e.msg, e.scope), e.expires_at);
                    }
                    Some(_) => {}
                    None => skipped += 1,
                }
            }
        }
        let mut record = RecordFile {
            path: path.to_path_buf(),
            file: OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(why)?,
            live,
            lines: 0,
            next_check: 0,
        };
        record.compact()?;
        let entries = record
            .live
            .iter()
            .map(|(&(msg, scope), &expires_at)| Remembered {
                msg,
                scope,
                expires_at,
            })
            .collect();
        Ok(Opened {
            record,
            entries,
            skipped,
        })
    }

    /// Rewrites the file with the live entries only (to a temporary file, synced, renamed).
    fn compact(&mut self) -> Result<(), String> {
        let tmp = self.path.with_extension("record.tmp");
        let why = |e: std::io::Error| format!("replay record {}: {e}", tmp.display());
        let mut f = File::create(&tmp).map_err(why)?;
        let text: String = self
            .live
            .iter()
            .map(|(&(msg, scope), &expires_at)| {
                line(&Remembered {
                    msg,
                    scope,
                    expires_at,
                })
            })
            .collect();
        f.write_all(text.as_bytes()).map_err(why)?;
        f.sync_data().map_err(why)?;
        std::fs::rename(&tmp, &self.path).map_err(why)?;
        self.file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(why)?;
        self.lines = self.live.len();
        self.next_check = self.lines + 1_024;
        Ok(())
    }
}

impl ReplayRecord for RecordFile {
    fn keep(&mut self, entries: &[Remembered], now_unix_ms: u64) -> Result<(), String> {
        let text: String = entries.iter().map(line).collect();
        let why = |e: std::io::Error| format!("replay record {}: {e}", self.path.display());
        self.file.write_all(text.as_bytes()).map_err(why)?;
        self.file.sync_data().map_err(why)?;
        self.lines += entries.len();
        for e in entries {
            self.live.insert((e.msg, e.scope), e.expires_at);
        }
        // Every 1,024 lines, forget what has expired; rewrite once the file holds twice what
        // is live.
        if self.lines >= self.next_check {
            self.live.retain(|_, at| *at >= now_unix_ms);
            if self.lines > 2 * self.live.len().max(1_024) {
                self.compact()?;
            }
            self.next_check = self.lines + 1_024;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u128, expires_at: u64) -> Remembered {
        Remembered {
            msg: format!("{:032x}", n).parse().unwrap_or(MsgId::MIN),
            scope: 7,
            expires_at,
        }
    }

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fleetd-record-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
        d
    }

    /// What was kept comes back after a reopen, unexpired entries only; a torn line is
    /// skipped and counted.
    #[test]
    fn a_reopened_record_gives_back_what_is_unexpired() {
        let path = dir("reopen").join("replay.record");
        let mut r = RecordFile::open(&path, 0)
            .unwrap_or_else(|e| panic!("{e}"))
            .record;
        r.keep(&[entry(1, 5_000), entry(2, 50)], 10)
            .unwrap_or_else(|e| panic!("{e}"));
        drop(r);
        let mut f = OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{e}"));
        f.write_all(b"00000000-0000-0000-0000-0000000000")
            .unwrap_or_else(|e| panic!("{e}"));
        let o = RecordFile::open(&path, 100).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(o.entries, vec![entry(1, 5_000)]);
        assert_eq!(o.skipped, 1);
    }

    /// The file never grows far past twice what is live (1,024 lines' slack between checks).
    #[test]
    fn the_file_is_compacted_to_what_is_live() {
        let path = dir("compact").join("replay.record");
        let mut r = RecordFile::open(&path, 0)
            .unwrap_or_else(|e| panic!("{e}"))
            .record;
        for n in 0..5_000u128 {
            // Each entry lives 10 ms: by the time 2,048 lines are written most are expired.
            let at = n as u64;
            r.keep(&[entry(n, at + 10)], at)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            text.lines().count() <= 2_048,
            "{} lines",
            text.lines().count()
        );
        let o = RecordFile::open(&path, 4_990).unwrap_or_else(|e| panic!("{e}"));
        assert!(o.entries.iter().all(|e| e.expires_at >= 4_990));
        assert!(o.entries.iter().any(|e| e.expires_at == 5_009));
    }
}
