//! States that every worker process of one machine shares, in a file mapped into each: the region
//! implementation of the state map's `Slots`. `file` maps the file, `lock` is the robust lock each shard
//! has, `table` is one shard's states, `layout` says where everything is, `slots` decides on a table,
//! `attached` is a map's hold on the region (which shard a key's lock takes, following the file), and
//! `clock` is the one clock every process of the region reads.

pub mod attached;
pub mod clock;
pub mod file;
pub mod layout;
pub mod lock;
pub mod slots;
pub mod table;

pub use slots::RegionSlots;

/// A fresh folder for a test's regions, `rk-KIND-PID-TEST` under the temporary folder (the test removes it).
#[cfg(test)]
pub(crate) fn test_dir(kind: &str, test: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rk-{kind}-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
