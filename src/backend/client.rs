//! The connection to Redis: the `redis` crate's multiplexed, auto-pipelined `ConnectionManager`
//! (reconnects with backoff) on a tokio runtime of our own, so that callers (Python threads) wait
//! for a reply without a runtime of their own.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

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
    client: redis::Client,
    idle: parking_lot::Mutex<Vec<redis::Connection>>,
    /// After a failure, connecting again waits until then (calls fail at once meanwhile): a server that
    /// is down costs each decision nothing, not a connection timeout.
    retry_at: parking_lot::Mutex<Option<std::time::Instant>>,
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
                    blocking = Some(Blocking {
                        client: client.clone(),
                        idle: parking_lot::Mutex::new(Vec::new()),
                        retry_at: parking_lot::Mutex::new(None),
                    });
                    let config = ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(connect_timeout))
                        .set_response_timeout(Some(timeout))
                        .set_number_of_retries(1)
                        .set_max_delay(Duration::from_secs(2));
                    let manager = ConnectionManager::new_lazy_with_config(client, config)
                        .map_err(|e| Error::value("url", format!("cannot use {:?}: {e}", redact(url))))?;
                    Connection::Single(manager)
                }
            }
        };
        let (decide, address) = (Arc::new(Decide::new(script)), redact(url).into());
        let handle = runtime.handle().clone();
        Ok(Self { handle, runtime: Some(runtime), connection, blocking, decide, timeout, address })
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
        let mut connection = match blocking.idle.lock().pop() {
            Some(connection) => connection,
            None => self.connect(blocking)?,
        };
        match self.decide.run(&mut connection, keys, args) {
            Ok(reply) => {
                blocking.idle.lock().push(connection);
                Ok(reply)
            }
            // The connection may hold a late reply: dropped, not reused.
            Err(e) => {
                if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
                    *blocking.retry_at.lock() = Some(std::time::Instant::now() + RECONNECT_AFTER);
                    blocking.idle.lock().clear();
                }
                Err(Failure(format!("Redis at {}: {e}", self.address)))
            }
        }
    }

    /// A new blocking connection with the client's timeouts, unless the server failed moments ago.
    fn connect(&self, blocking: &Blocking) -> std::result::Result<redis::Connection, Failure> {
        if let Some(at) = *blocking.retry_at.lock() {
            if std::time::Instant::now() < at {
                return Err(Failure(format!("Redis at {} is unavailable (failed moments ago)", self.address)));
            }
        }
        let connected = blocking
            .client
            .get_connection_with_timeout(self.timeout.max(Duration::from_millis(100)))
            .and_then(|connection| {
                connection.set_read_timeout(Some(self.timeout))?;
                connection.set_write_timeout(Some(self.timeout))?;
                Ok(connection)
            });
        connected.map_err(|e| {
            *blocking.retry_at.lock() = Some(std::time::Instant::now() + RECONNECT_AFTER);
            Failure(format!("Redis at {}: {e}", self.address))
        })
    }

    /// Runs the script as `run` does, on the client's runtime, and hands the reply to `done` there.
    pub fn spawn(
        &self,
        keys: Vec<String>,
        args: Vec<String>,
        done: impl FnOnce(std::result::Result<Vec<String>, Failure>) + Send + 'static,
    ) {
        let call = self.call(keys, args);
        self.handle.spawn(async move { done(call.await) });
    }

    /// One script call, bounded by the timeout; owns what it needs, so it can run on any thread.
    fn call(
        &self,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> impl std::future::Future<Output = std::result::Result<Vec<String>, Failure>> + Send + 'static {
        let (decide, mut connection) = (Arc::clone(&self.decide), self.connection.clone());
        let (timeout, address) = (self.timeout, Arc::clone(&self.address));
        async move {
            match tokio::time::timeout(timeout, decide.run_async(&mut connection, &keys, &args)).await {
                Ok(Ok(reply)) => Ok(reply),
                Ok(Err(e)) => Err(Failure(format!("Redis at {address}: {e}"))),
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
            Ok(Err(e)) => Err(Failure(format!("Redis at {}: {e}", self.address))),
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
            Ok(Err(e)) => Err(Failure(format!("Redis at {}: {e}", self.address))),
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
