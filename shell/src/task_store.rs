//! The task lists kept on disk: each lead's whole list (`Output::KeepTasks`) written to its own
//! file under `<state>/tasks/` — to a temporary file, synced, renamed over the old one, the
//! directory synced — before the brief or the ack the change leads to, and given back at start
//! (`Input::TasksRestored`). A file that does not parse is set aside, never half-read.

use fleet_core::tasks::TaskList;
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Where the driver keeps task lists.
pub trait TaskStore {
    fn keep(&mut self, list: &TaskList) -> Result<(), String>;
}

/// No disk: tests that do not restart.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTaskStore;

impl TaskStore for NoTaskStore {
    fn keep(&mut self, _list: &TaskList) -> Result<(), String> {
        Ok(())
    }
}

/// One JSON file per lead, named by a hash of its gid (a gid may hold any character).
#[derive(Debug)]
pub struct TaskDir {
    dir: PathBuf,
}

/// What opening the directory found.
#[derive(Debug)]
pub struct Opened {
    pub store: TaskDir,
    pub lists: Vec<TaskList>,
    /// Files that did not parse, renamed `*.bad` beside the others, and why.
    pub set_aside: Vec<(PathBuf, String)>,
}

impl TaskDir {
    pub fn open(dir: &Path) -> Result<Opened, String> {
        let why = |e: std::io::Error| format!("task lists {}: {e}", dir.display());
        std::fs::create_dir_all(dir).map_err(why)?;
        let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(why)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        names.sort();
        let (mut lists, mut set_aside) = (Vec::new(), Vec::new());
        for path in names {
            let parsed = std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<TaskList>(&b).map_err(|e| e.to_string()))
                .and_then(|l| {
                    // A file must be the list its name says: one renamed or copied is not.
                    (path.file_name() == Some(file_name(&l).as_ref()))
                        .then_some(l)
                        .ok_or_else(|| "its name is not its lead's".to_string())
                });
            match parsed {
                Ok(l) => lists.push(l),
                Err(reason) => {
                    let bad = path.with_extension("bad");
                    std::fs::rename(&path, &bad).map_err(why)?;
                    set_aside.push((bad, reason));
                }
            }
        }
        Ok(Opened {
            store: TaskDir {
                dir: dir.to_path_buf(),
            },
            lists,
            set_aside,
        })
    }
}

fn file_name(list: &TaskList) -> String {
    let hash = Sha256::digest(list.lead.as_str().as_bytes());
    let hex: String = hash.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{hex}.json")
}

impl TaskStore for TaskDir {
    fn keep(&mut self, list: &TaskList) -> Result<(), String> {
        let path = self.dir.join(file_name(list));
        let tmp = path.with_extension("tmp");
        let why = |e: std::io::Error| format!("task list {}: {e}", path.display());
        let text = serde_json::to_vec(list).map_err(|e| e.to_string())?;
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(why)?;
        f.write_all(&text).map_err(why)?;
        f.sync_data().map_err(why)?;
        std::fs::rename(&tmp, &path).map_err(why)?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(why)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_core::tasks::{NewTask, Tasks};
    use fleet_core::{Principal, SessionId};

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fleet-tasks-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn list(lead: &str, titles: &[&str]) -> TaskList {
        let lead = SessionId::new(lead);
        let mut t = Tasks::default();
        for title in titles {
            t.add(
                &Principal::primary("lead", Some(lead.clone())),
                &lead,
                NewTask {
                    title: (*title).into(),
                    brief: "b".into(),
                    assignee: SessionId::new("m"),
                    deps: vec![],
                    timeout_ms: None,
                },
                1,
            )
            .expect("added");
        }
        t.take_dirty().remove(0)
    }

    #[test]
    fn each_leads_list_comes_back_as_last_kept() {
        let d = dir("back");
        let mut s = TaskDir::open(&d).expect("open").store;
        s.keep(&list("lead/1", &["a"])).expect("kept");
        s.keep(&list("lead/1", &["a", "b"])).expect("kept");
        s.keep(&list("lead-2", &["c"])).expect("kept");
        let opened = TaskDir::open(&d).expect("open");
        assert!(opened.set_aside.is_empty());
        let mut titles: Vec<Vec<String>> = opened
            .lists
            .iter()
            .map(|l| l.tasks.values().map(|t| t.title.clone()).collect())
            .collect();
        titles.sort();
        assert_eq!(titles, vec![vec!["a", "b"], vec!["c"]]);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_damaged_or_renamed_file_is_set_aside_not_believed() {
        let d = dir("bad");
        let mut s = TaskDir::open(&d).expect("open").store;
        s.keep(&list("lead-1", &["a"])).expect("kept");
        std::fs::write(d.join("00.json"), b"{\"lead\":").expect("write");
        let theirs = d.join(file_name(&list("lead-1", &["a"])));
        std::fs::copy(&theirs, d.join("11.json")).expect("copy");
        let opened = TaskDir::open(&d).expect("open");
        assert_eq!(opened.lists.len(), 1);
        assert_eq!(opened.set_aside.len(), 2, "{:?}", opened.set_aside);
        assert!(d.join("00.bad").exists());
        let _ = std::fs::remove_dir_all(&d);
    }
}
