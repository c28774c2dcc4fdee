//! How a decision calls `decide.lua`: as a Redis Function (`FCALL`, Redis 7+), whose definitions run
//! once when the library loads, or by `EVALSHA` on a server without functions (before Redis 7, or
//! `FUNCTION` renamed away or denied by an ACL), where they run on every call. The library is loaded
//! on first use and again whenever the server has lost it (a restart, `FUNCTION FLUSH`).

use std::sync::atomic::{AtomicBool, Ordering};

use redis::{Cmd, ConnectionLike, RedisError, RedisResult, Value};

pub struct Decide {
    /// The `EVALSHA` form, loaded again after a `NOSCRIPT` by the crate.
    script: redis::Script,
    /// The `FUNCTION LOAD` source: a library named after the source's hash, so that two versions of
    /// ratekeeper on one server keep their own.
    library: String,
    function: String,
    /// Set once the server has answered that it has no functions.
    eval_only: AtomicBool,
}

impl Decide {
    /// The calls of `source`, a Lua chunk that defines a local function `decide(KEYS, ARGV)`.
    #[must_use]
    pub fn new(source: &str) -> Self {
        let script = redis::Script::new(&format!("{source}\nreturn decide(KEYS, ARGV)\n"));
        let id = &script.get_hash()[..16];
        let function = format!("ratekeeper_decide_{id}");
        let library = format!("#!lua name=ratekeeper_{id}\n{source}\nredis.register_function('{function}', decide)\n");
        Self { script, library, function, eval_only: AtomicBool::new(false) }
    }

    /// Whether calls go by `EVALSHA` (the server has no functions).
    #[must_use]
    pub fn eval_only(&self) -> bool {
        self.eval_only.load(Ordering::Relaxed)
    }

    fn fcall(&self, keys: &[String], args: &[String]) -> Cmd {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(&self.function).arg(keys.len()).arg(keys).arg(args);
        cmd
    }

    fn load(&self) -> Cmd {
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LOAD").arg("REPLACE").arg(&self.library);
        cmd
    }

    fn invocation(&self, keys: &[String], args: &[String]) -> redis::ScriptInvocation<'_> {
        let mut invocation = self.script.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        for arg in args {
            invocation.arg(arg);
        }
        invocation
    }

    /// What a function call's failure means: `Some(reply)` is the call's outcome, `None` to go on by
    /// `EVALSHA`, `Err(Load)` to load the library and call again.
    fn after_fcall(&self, reply: RedisResult<Vec<String>>) -> Result<Option<RedisResult<Vec<String>>>, Load> {
        match reply {
            Err(e) if not_loaded(&e) => Err(Load),
            Err(e) if no_functions(&e) => {
                self.eval_only.store(true, Ordering::Relaxed);
                Ok(None)
            }
            reply => Ok(Some(reply)),
        }
    }

    /// What a failed load means: `None` to go on by `EVALSHA`, else the error.
    fn after_load(&self, e: RedisError) -> Option<RedisError> {
        if no_functions(&e) {
            self.eval_only.store(true, Ordering::Relaxed);
            return None;
        }
        Some(e)
    }

    /// One decision on a blocking connection.
    ///
    /// # Errors
    /// What the server or the connection says.
    pub fn run(
        &self,
        connection: &mut impl ConnectionLike,
        keys: &[String],
        args: &[String],
    ) -> RedisResult<Vec<String>> {
        if !self.eval_only() {
            match self.after_fcall(self.fcall(keys, args).query(connection)) {
                Ok(Some(reply)) => return reply,
                Ok(None) => {}
                Err(Load) => match self.load().query::<Value>(connection) {
                    Ok(_) => return self.fcall(keys, args).query(connection),
                    Err(e) => {
                        if let Some(e) = self.after_load(e) {
                            return Err(e);
                        }
                    }
                },
            }
        }
        self.invocation(keys, args).invoke(connection)
    }

    /// One decision on an async connection.
    ///
    /// # Errors
    /// What the server or the connection says.
    pub async fn run_async(
        &self,
        connection: &mut (impl redis::aio::ConnectionLike + Send),
        keys: &[String],
        args: &[String],
    ) -> RedisResult<Vec<String>> {
        if !self.eval_only() {
            match self.after_fcall(self.fcall(keys, args).query_async(connection).await) {
                Ok(Some(reply)) => return reply,
                Ok(None) => {}
                Err(Load) => match self.load().query_async::<Value>(connection).await {
                    Ok(_) => return self.fcall(keys, args).query_async(connection).await,
                    Err(e) => {
                        if let Some(e) = self.after_load(e) {
                            return Err(e);
                        }
                    }
                },
            }
        }
        self.invocation(keys, args).invoke_async(connection).await
    }
}

/// The library must be loaded first.
struct Load;

/// The server does not have the library (yet, or any more: a restart, `FUNCTION FLUSH`).
fn not_loaded(e: &RedisError) -> bool {
    e.code() == Some("ERR") && e.detail().is_some_and(|d| d.starts_with("Function not found"))
}

/// The server has no functions: before Redis 7, or `FCALL` / `FUNCTION` renamed away or not allowed.
fn no_functions(e: &RedisError) -> bool {
    match e.code() {
        Some("NOPERM") => true,
        Some("ERR") => {
            e.detail().is_some_and(|d| d.starts_with("unknown command") || d.starts_with("unknown subcommand"))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_registers_the_function_its_calls_name() {
        let decide = Decide::new("local function decide(KEYS, ARGV) return {} end");
        assert!(decide.library.starts_with("#!lua name=ratekeeper_"));
        assert!(decide.library.contains(&format!("redis.register_function('{}', decide)", decide.function)));
        let call = decide.fcall(&["k".into()], &["a".into(), "b".into()]);
        assert_eq!(call.args_iter().count(), 6); // FCALL name 1 k a b
        assert!(!decide.eval_only());
    }

    #[test]
    fn two_sources_get_two_libraries() {
        let (a, b) =
            (Decide::new("local function decide() return 1 end"), Decide::new("local function decide() return 2 end"));
        assert_ne!(a.function, b.function);
    }
}
