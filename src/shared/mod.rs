//! The shared-memory store (issue 21): states that every worker process of one machine shares, in a
//! file mapped into each. `region` maps the file, `lock` is the robust lock each shard has, `table` is
//! one shard's states, `layout` says where everything is.

pub mod layout;
pub mod lock;
pub mod region;
pub mod table;
