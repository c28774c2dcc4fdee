//! The shared-memory store: states that every worker process of one machine shares, in a
//! file mapped into each. `region` maps the file, `lock` is the robust lock each shard has, `table` is
//! one shard's states, `layout` says where everything is.

pub mod layout;
pub mod lock;
pub mod region;
pub mod table;

#[cfg(test)]
mod fuzz;

/// A fresh folder for a test's regions, `rk-KIND-PID-TEST` under the temporary folder (the test removes it).
#[cfg(test)]
pub(crate) fn test_dir(kind: &str, test: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rk-{kind}-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
