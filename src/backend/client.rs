//! The connection to Redis: the `redis` crate's multiplexed, auto-pipelined `ConnectionManager`
//! (reconnects with backoff) on a tokio runtime of our own, so that callers (Python threads) wait
//! for a reply without a runtime of their own.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, Pipeline, RedisFuture, TlsCertificates, Value};

use super::function::Decide;
use super::Settings;
use crate::error::{Error, Result};

/// Why a round trip failed: what `on_error` applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure(pub String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One server through the connection manager, or a Cluster (each key's commands go to its slot's node).
#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// The node URLs of `redis+cluster://[user:password@]host:port,host:port` (or `rediss+cluster://`).
fn cluster_nodes(url: &str) -> Option<Vec<String>> {
    let (scheme, rest) = url.split_once("+cluster://")?;
    let (auth, hosts) = rest.rsplit_once('@').map_or(("", rest), |(auth, hosts)| (auth, hosts));
    let auth = if auth.is_empty() { String::new() } else { format!("{auth}@") };
    Some(hosts.split(',').filter(|h| !h.is_empty()).map(|host| format!("{scheme}://{auth}{host}")).collect())
}

/// Blocking connections of one server, for callers that wait (Python threads): the caller's thread
/// writes the request and reads the reply itself, with no hand-off to the runtime's thread and back
/// (two thread wake-ups, most of a round trip's client cost here).
struct Blocking {
    /// Connects without the crate's setup pipeline (see `Setup`).
    bare: redis::Client,
    setup: Setup,
    idle: parking_lot::Mutex<Vec<Pooled>>,
    /// Shared with the asyncio calls, whose answers lift it.
    gate: Arc<ReconnectGate>,
}

/// After a failure, blocking callers connect again only once `RECONNECT_AFTER` has passed (calls fail
/// at once meanwhile): a server that is down costs each decision nothing, not a connection timeout.
/// Any answer from the server lifts it (an asyncio call's included): a gate that outlived its outage
/// would fail blocking calls on a server that answers, and begin a second outage.
struct ReconnectGate {
    since: Instant,
    /// Nanoseconds after `since` until which connecting waits; 0 when open.
    closed_until_ns: AtomicU64,
}

impl ReconnectGate {
    fn new() -> Self {
        Self { since: Instant::now(), closed_until_ns: AtomicU64::new(0) }
    }

    fn close(&self) {
        let until = (Instant::now() + RECONNECT_AFTER).duration_since(self.since);
        self.closed_until_ns.store(u64::try_from(until.as_nanos()).unwrap_or(u64::MAX), Ordering::Release);
    }

    fn is_closed(&self) -> bool {
        let until = self.closed_until_ns.load(Ordering::Acquire);
        until != 0 && u128::from(until) > self.since.elapsed().as_nanos()
    }

    /// Lifts the gate; on the hot path a load, and a store only when it was closed.
    fn open(&self) {
        if self.closed_until_ns.load(Ordering::Relaxed) != 0 {
            self.closed_until_ns.store(0, Ordering::Release);
        }
    }
}

/// What a new blocking connection sends before its first decision, one command at a time under the
/// decision's deadline. The crate's own setup pipelines AUTH, SELECT and two CLIENT SETINFO and reads
/// every reply with the whole read timeout, even after the first timed out: 2-4 timeouts against a
/// server that accepts and never answers.
struct Setup {
    /// `AUTH [username] password` (RESP2; over RESP3 the crate's `HELLO` carries them, its one command).
    auth: Option<(Option<String>, String)>,
    db: i64,
}

impl Blocking {
    fn new(client: &redis::Client) -> redis::RedisResult<Self> {
        let info = client.get_connection_info().clone();
        let wanted = info.redis_settings().clone();
        let resp3 = wanted.protocol().supports_resp3();
        // CLIENT SETINFO is left out (it names the client library in CLIENT LIST, nothing more).
        let mut bare = redis::RedisConnectionInfo::default().set_protocol(wanted.protocol()).set_skip_set_lib_name();
        let mut auth = None;
        if let Some(password) = wanted.password() {
            if resp3 {
                bare = bare.set_password(password);
                if let Some(username) = wanted.username() {
                    bare = bare.set_username(username);
                }
            } else {
                auth = Some((wanted.username().map(str::to_owned), password.to_owned()));
            }
        }
        Ok(Self {
            bare: redis::Client::open(info.set_redis_settings(bare))?,
            setup: Setup { auth, db: wanted.db() },
            idle: parking_lot::Mutex::new(Vec::new()),
            gate: Arc::new(ReconnectGate::new()),
        })
    }

    /// A connection set up by `deadline`.
    fn connect(&self, deadline: Instant) -> redis::RedisResult<Pooled> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the decision's deadline has passed").into());
        }
        // The TCP (and TLS) connection, and over RESP3 its one HELLO, within what is left.
        let connection = self.bare.get_connection_with_timeout(left)?;
        let mut pooled = Pooled { connection, socket_timeout: None };
        let mut bounded = Deadlined { pooled: &mut pooled, deadline };
        if let Some((username, password)) = &self.setup.auth {
            let mut auth = redis::cmd("AUTH");
            auth.arg(username.as_deref()).arg(password);
            match auth.query::<()>(&mut bounded) {
                // A server before Redis 6 knows no users: the password alone, as the crate does.
                Err(e) if username.is_some() && e.to_string().contains("wrong number of arguments") => {
                    redis::cmd("AUTH").arg(password).query::<()>(&mut bounded)?;
                }
                authenticated => authenticated?,
            }
        }
        if self.setup.db != 0 {
            redis::cmd("SELECT").arg(self.setup.db).query::<()>(&mut bounded)?;
        }
        Ok(pooled)
    }
}

/// A blocking connection, with the read and write timeouts its socket has now.
struct Pooled {
    connection: redis::Connection,
    socket_timeout: Option<Duration>,
}

/// How far a socket's timeout may be from the time a call has left before it is set again: a call's
/// first command on a pooled connection makes no system call (its socket already has the timeout).
const TIMEOUT_SLACK: Duration = Duration::from_millis(1);

impl Pooled {
    /// Gives the next command's reply until `deadline`, or fails at once when it has passed.
    fn bound(&mut self, deadline: Instant) -> redis::RedisResult<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the decision's deadline has passed").into());
        }
        if self.socket_timeout.is_none_or(|set| set.abs_diff(left) > TIMEOUT_SLACK) {
            self.connection.set_read_timeout(Some(left))?;
            self.connection.set_write_timeout(Some(left))?;
            self.socket_timeout = Some(left);
        }
        Ok(())
    }
}

/// A pooled connection whose every command (the decision's, and the library or script it loads on the
/// way) must be answered by one deadline.
struct Deadlined<'a> {
    pooled: &'a mut Pooled,
    deadline: Instant,
}

impl redis::ConnectionLike for Deadlined<'_> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<Value> {
        self.pooled.bound(self.deadline)?;
        self.pooled.connection.req_packed_command(cmd)
    }

    fn req_packed_commands(&mut self, cmd: &[u8], offset: usize, count: usize) -> redis::RedisResult<Vec<Value>> {
        self.pooled.bound(self.deadline)?;
        self.pooled.connection.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.pooled.connection.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.pooled.bound(self.deadline).is_ok() && self.pooled.connection.check_connection()
    }

    fn is_open(&self) -> bool {
        self.pooled.connection.is_open()
    }
}

/// Whether `e` says the connection was dead (closed by the server, reset, a broken pipe), as a pooled
/// connection is after a restart, an idle timeout or a proxy's reconnection; not a timeout (a slow
/// server may be running the command: sending it again could count it twice).
fn found_dead(e: &redis::RedisError) -> bool {
    e.is_connection_dropped() && !e.is_timeout()
}

/// How long a failed server is left alone before a blocking caller connects again.
const RECONNECT_AFTER: Duration = Duration::from_millis(250);

pub struct Client {
    /// Where calls run: the runtime below, which is owned only to be shut down with the client.
    handle: tokio::runtime::Handle,
    runtime: Option<tokio::runtime::Runtime>,
    connection: Connection,
    /// `None` for a Cluster (its calls go through the runtime).
    blocking: Option<Blocking>,
    decide: Arc<Decide>,
    timeout: Duration,
    /// The address, without a password, for messages.
    address: Arc<str>,
    /// The calls `spawn` hands to the runtime, started in the order they were made (see `dispatch`).
    calls: tokio::sync::mpsc::UnboundedSender<Pending>,
}

/// A call under way on the runtime, with what its reply goes to.
type Pending = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Runs the calls `spawn` queued, each started (its command written to the connection) in the order they
/// were queued, and all awaited together: asyncio waiters that reserve slots one after another reach
/// Redis in that order, as they would in memory. (A task per call would start them in whatever order the
/// runtime's threads pick them up.)
async fn dispatch(mut calls: tokio::sync::mpsc::UnboundedReceiver<Pending>) {
    use futures_util::stream::{FuturesUnordered, StreamExt};
    use std::task::Poll;
    let mut running = FuturesUnordered::new();
    let mut open = true;
    std::future::poll_fn(|cx| {
        while open {
            match calls.poll_recv(cx) {
                Poll::Ready(Some(call)) => running.push(call),
                Poll::Ready(None) => open = false,
                Poll::Pending => break,
            }
        }
        // A new call is polled after those before it (the set's queue of ready tasks is first in, first
        // out), so its command is written after theirs.
        while let Poll::Ready(Some(())) = running.poll_next_unpin(cx) {}
        if open || !running.is_empty() {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").field("address", &self.address).field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // The last owner may be a task on a runtime (sync mode's timer outliving its limiter), where
        // a runtime cannot be dropped, as that blocks until its threads stop: let it stop by itself.
        if let Some(runtime) = self.runtime.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                runtime.shutdown_background();
            }
        }
    }
}

impl Client {
    /// A client of the server at `url` (`redis://`, `rediss://`, `unix://`), connecting lazily: a
    /// server that is down fails decisions (and `on_error` applies), never the construction.
    ///
    /// # Errors
    /// A URL the `redis` crate does not accept, or a runtime that cannot start.
    pub fn open(settings: &Settings, script: &str) -> Result<Self> {
        let (url, timeout) = (settings.url.as_str(), settings.timeout);
        let certificates = || TlsCertificates { client_tls: None, root_cert: settings.tls_ca.clone() };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ratekeeper-redis")
            .enable_all()
            .build()
            .map_err(|e| Error::value("backend", format!("cannot start the Redis client's runtime: {e}")))?;
        let connect_timeout = timeout.max(Duration::from_millis(100));
        let bad_url = |e: redis::RedisError| Error::value("url", format!("{:?} is not a Redis URL: {e}", redact(url)));
        let mut blocking = None;
        let connection = {
            let _entered = runtime.enter();
            match cluster_nodes(url) {
                Some(nodes) if nodes.is_empty() => {
                    return Err(Error::value("url", format!("{:?} names no node", redact(url))));
                }
                Some(nodes) => {
                    let mut builder = ClusterClient::builder(nodes)
                        .connection_timeout(connect_timeout)
                        .response_timeout(timeout)
                        .retries(1);
                    if settings.tls_ca.is_some() {
                        builder = builder.certs(certificates());
                    }
                    let client = builder.build().map_err(bad_url)?;
                    Connection::Cluster(client.get_pending_async_connection_with_config(ClusterConfig::default()))
                }
                None => {
                    let client = match settings.tls_ca {
                        Some(_) => redis::Client::build_with_tls(url, certificates()),
                        None => redis::Client::open(url),
                    }
                    .map_err(bad_url)?;
                    blocking = Some(Blocking::new(&client).map_err(bad_url)?);
                    let config = ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(connect_timeout))
                        .set_response_timeout(Some(timeout))
                        .set_number_of_retries(1)
                        // The crate's first retry comes after 100 ms, past a decision's timeout (50 ms by
                        // default): a refused connection would be reported as a silent server.
                        .set_min_delay(Duration::from_millis(5))
                        .set_max_delay(Duration::from_secs(2));
                    let manager = ConnectionManager::new_lazy_with_config(client, config)
                        .map_err(|e| Error::value("url", format!("cannot use {:?}: {e}", redact(url))))?;
                    Connection::Single(manager)
                }
            }
        };
        let (decide, address) = (Arc::new(Decide::new(script)), redact(url).into());
        let handle = runtime.handle().clone();
        let (calls, queued) = tokio::sync::mpsc::unbounded_channel();
        handle.spawn(dispatch(queued));
        Ok(Self { handle, runtime: Some(runtime), connection, blocking, decide, timeout, address, calls })
    }

    /// Checks a URL the way `open` reads it, without connecting.
    ///
    /// # Errors
    /// A URL the `redis` crate does not accept, or a Cluster URL without nodes.
    pub fn check_url(url: &str) -> Result<()> {
        let shown = redact(url);
        let bad_url = |e: redis::RedisError| Error::value("url", format!("{shown:?} is not a Redis URL: {e}"));
        match cluster_nodes(url) {
            Some(nodes) if nodes.is_empty() => Err(Error::value("url", format!("{shown:?} names no node"))),
            Some(nodes) => ClusterClient::new(nodes).map(drop).map_err(bad_url),
            None => redis::Client::open(url).map(drop).map_err(bad_url),
        }
    }

    /// Runs the decision script on `keys` and `args` (`FCALL`, or `EVALSHA` on a server without
    /// functions: see `function.rs`), waiting at most the timeout. Call it without the GIL.
    ///
    /// # Errors
    /// The server is unreachable, too slow, or answered with an error.
    pub fn run(&self, keys: &[String], args: &[String]) -> std::result::Result<Vec<String>, Failure> {
        match &self.blocking {
            Some(blocking) => self.run_blocking(blocking, keys, args),
            None => self.handle.block_on(self.call(keys.to_vec(), args.to_vec())),
        }
    }

    fn run_blocking(
        &self,
        blocking: &Blocking,
        keys: &[String],
        args: &[String],
    ) -> std::result::Result<Vec<String>, Failure> {
        // One deadline for the whole call: connecting, setting up, loading the library, the decision.
        let deadline = Instant::now() + self.timeout;
        let pooled = blocking.idle.lock().pop();
        let reused = pooled.is_some();
        let mut pooled = match pooled {
            Some(pooled) => pooled,
            None => self.connect(blocking, deadline)?,
        };
        let mut reply = self.decide.run(&mut Deadlined { pooled: &mut pooled, deadline }, keys, args);
        if reused && reply.as_ref().is_err_and(found_dead) {
            // The connection died while idle in the pool (those idle with it most likely too): sent
            // again once on a new one. If the server had run it before its reply was lost, the key
            // counts it twice: at most one extra per dropped connection (the README says so).
            blocking.idle.lock().clear();
            pooled = self.connect(blocking, deadline)?;
            reply = self.decide.run(&mut Deadlined { pooled: &mut pooled, deadline }, keys, args);
        }
        match reply {
            Ok(reply) => {
                blocking.gate.open();
                blocking.idle.lock().push(pooled);
                Ok(reply)
            }
            // The connection may hold a late reply: dropped, not reused.
            Err(e) => {
                if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
                    blocking.gate.close();
                    blocking.idle.lock().clear();
                }
                Err(self.failure(&e))
            }
        }
    }

    /// A new blocking connection, set up by `deadline`, unless the server failed moments ago.
    fn connect(&self, blocking: &Blocking, deadline: Instant) -> std::result::Result<Pooled, Failure> {
        if blocking.gate.is_closed() {
            return Err(Failure(format!("Redis at {} is unavailable (failed moments ago)", self.address)));
        }
        let connected = blocking.connect(deadline);
        connected.map_err(|e| {
            blocking.gate.close();
            self.failure(&e)
        })
    }

    fn failure(&self, e: &redis::RedisError) -> Failure {
        describe(&self.address, self.timeout, e)
    }

    /// Runs the script as `run` does, on the client's runtime, and hands the reply to `done` there.
    pub fn spawn(
        &self,
        keys: Vec<String>,
        args: Vec<String>,
        done: impl FnOnce(std::result::Result<Vec<String>, Failure>) + Send + 'static,
    ) {
        let call = self.call(keys, args);
        let pending: Pending = Box::pin(async move { done(call.await) });
        if let Err(unsent) = self.calls.send(pending) {
            // The dispatcher is gone (the runtime is shutting down): run it on its own.
            self.handle.spawn(unsent.0);
        }
    }

    /// One script call, bounded by the timeout; owns what it needs, so it can run on any thread.
    fn call(
        &self,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> impl std::future::Future<Output = std::result::Result<Vec<String>, Failure>> + Send + 'static {
        let (decide, mut connection) = (Arc::clone(&self.decide), self.connection.clone());
        let (timeout, address) = (self.timeout, Arc::clone(&self.address));
        let gate = self.blocking.as_ref().map(|blocking| Arc::clone(&blocking.gate));
        async move {
            let attempts = async {
                match decide.run_async(&mut connection, &keys, &args).await {
                    // The connection died while idle (a restart): the manager reconnects after this
                    // failure, and the call is sent once more on the new connection, within the same
                    // timeout. If the server had run it, it counts twice: at most once more per call
                    // in flight on the dropped connection (the README says so).
                    Err(e) if found_dead(&e) => decide.run_async(&mut connection, &keys, &args).await,
                    reply => reply,
                }
            };
            match tokio::time::timeout(timeout, attempts).await {
                Ok(Ok(reply)) => {
                    if let Some(gate) = gate {
                        gate.open();
                    }
                    Ok(reply)
                }
                Ok(Err(e)) => Err(describe(&address, timeout, &e)),
                Err(_) => Err(Failure(format!("Redis at {address} did not answer within {timeout:?}"))),
            }
        }
    }

    /// Sends `pipe` in one round trip, bounded by the timeout (sync mode's push and pull).
    ///
    /// # Errors
    /// The server is unreachable, too slow, or answered with an error.
    pub async fn pipeline<T: redis::FromRedisValue>(&self, pipe: redis::Pipeline) -> std::result::Result<T, Failure> {
        let mut connection = self.connection.clone();
        match tokio::time::timeout(self.timeout, pipe.query_async::<T>(&mut connection)).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(self.failure(&e)),
            Err(_) => Err(Failure(format!("Redis at {} did not answer within {:?}", self.address, self.timeout))),
        }
    }

    #[must_use]
    pub const fn runtime(&self) -> &tokio::runtime::Handle {
        &self.handle
    }

    #[must_use]
    pub fn address(&self) -> &str {
        &self.address
    }
}

/// What the caller (and the log) is told about `e`, on one line, naming the cause.
fn describe(address: &str, timeout: Duration, e: &redis::RedisError) -> Failure {
    if e.is_timeout() {
        return Failure(format!("Redis at {address} did not answer within {timeout:?}"));
    }
    if e.kind() == redis::ErrorKind::Parse {
        // The crate's parse errors span lines ("Unexpected `84`" for each byte it could not read).
        let detail = e.to_string().split_whitespace().collect::<Vec<_>>().join(" ");
        return Failure(format!(
            "Redis at {address} answered with something that is not the Redis protocol (another kind of server, or a proxy, on that port?): {detail}"
        ));
    }
    Failure(format!("Redis at {address}: {e}"))
}

/// Key maintenance (`reset`): commands beside the decisions, on the same connection.
impl Client {
    /// Where a `SCAN` must run to see every key: the server (`None`), or each primary of a Cluster by
    /// address (a cursor walks one node's keys).
    ///
    /// # Errors
    /// The server or Cluster is unreachable, too slow, or answered with an error.
    pub async fn primaries(&self) -> std::result::Result<Vec<Option<String>>, Failure> {
        let Connection::Cluster(cluster) = &self.connection else {
            return Ok(vec![None]);
        };
        let every_primary = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
        let reply = self.bounded(cluster.clone().route_command(redis::cmd("PING"), every_primary)).await?;
        // Without a response policy the Cluster answers with a map of node address to reply.
        match reply {
            Value::Map(nodes) => {
                Ok(nodes.into_iter().filter_map(|(node, _)| redis::from_redis_value(node).ok()).collect())
            }
            other => {
                Err(Failure(format!("Redis at {}: unexpected reply listing the primaries: {other:?}", self.address)))
            }
        }
    }

    /// Runs `cmd` on `node` (an address from `primaries`), or where its keys route (`None`), bounded by
    /// the timeout.
    ///
    /// # Errors
    /// The server is unreachable, too slow, or answered with an error.
    pub async fn query_on(&self, cmd: Cmd, node: Option<&str>) -> std::result::Result<Value, Failure> {
        match (&self.connection, node) {
            (Connection::Cluster(cluster), Some(address)) => {
                let (host, port) = address
                    .rsplit_once(':')
                    .and_then(|(host, port)| Some((host.to_owned(), port.parse().ok()?)))
                    .ok_or_else(|| Failure(format!("Redis at {}: not a node address: {address:?}", self.address)))?;
                let node = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
                self.bounded(cluster.clone().route_command(cmd, node)).await
            }
            (connection, _) => {
                let mut connection = connection.clone();
                self.bounded(async move { cmd.query_async::<Value>(&mut connection).await }).await
            }
        }
    }

    async fn bounded(
        &self,
        request: impl std::future::Future<Output = redis::RedisResult<Value>>,
    ) -> std::result::Result<Value, Failure> {
        match tokio::time::timeout(self.timeout, request).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(describe(&self.address, self.timeout, &e)),
            Err(_) => Err(Failure(format!("Redis at {} did not answer within {:?}", self.address, self.timeout))),
        }
    }
}

/// `url` without its password.
#[must_use]
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}://***@{}", &url[..scheme], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(url: &str) -> Settings {
        Settings {
            url: url.into(),
            tls_ca: None,
            timeout: Duration::from_millis(50),
            prefix: String::new(),
            on_error: super::super::OnError::Local,
            lease_ttl: Duration::from_secs(1),
        }
    }

    #[test]
    fn cluster_urls_name_their_nodes() {
        assert_eq!(
            cluster_nodes("redis+cluster://u:p@10.0.0.1:7000,10.0.0.2:7001").unwrap(),
            ["redis://u:p@10.0.0.1:7000", "redis://u:p@10.0.0.2:7001"]
        );
        assert_eq!(cluster_nodes("rediss+cluster://h:1").unwrap(), ["rediss://h:1"]);
        assert!(cluster_nodes("redis://h:1").is_none());
        assert!(Client::check_url("redis+cluster://").is_err());
    }

    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(redact("redis://user:secret@10.0.0.5:6379/0"), "redis://***@10.0.0.5:6379/0");
        assert_eq!(redact("unix:///run/redis.sock"), "unix:///run/redis.sock");
    }

    #[test]
    fn bad_urls_are_named_at_construction() {
        let e = Client::open(&settings("http://localhost"), "return 1").unwrap_err();
        assert_eq!(e.path(), "url");
        assert!(e.message.contains("not a Redis URL"), "{e}");
    }

    #[test]
    fn an_unreachable_server_fails_within_the_timeout() {
        // Port 1 on loopback: nothing listens there.
        let client = Client::open(&settings("redis://127.0.0.1:1/0"), "return 1").unwrap();
        let started = std::time::Instant::now();
        assert!(client.run(&[], &[]).is_err());
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
