//! tunnelgate-etcd: the etcd client of the gateway's coordination layer, over etcd's own
//! JSON gateway (`/v3/...` over HTTP, with the gateway's one client,
//! `tunnelgate_egress::client`): leases, keys, transactions and watches, and nothing
//! else. The gateway needs no generated gRPC code, so the build needs no `protoc`.
//!
//! Invariants:
//! - never a proxy, never a redirect; TLS from `coordination.etcd.tls` through
//!   `tunnelgate_egress::tls` (a client certificate goes to the configured endpoints only);
//! - each attempt is bounded by `request_timeout`; on a connect error or a timeout the
//!   next endpoint is tried (also after an `UNAVAILABLE` answer), in order, starting
//!   from the one that answered last. A call therefore takes at most
//!   `endpoints × request_timeout` (twice that, plus one
//!   authentication, when its token had to be renewed). A write that timed out may have
//!   been applied before it is tried again elsewhere: callers make writes idempotent, or
//!   read the outcome back (a txn's failure branch);
//! - with a username, the token from `auth/authenticate` is fetched before the first
//!   call, sent as `Authorization`, and fetched again once when etcd calls it invalid
//!   (simple tokens die with an etcd restart);
//! - no value, password or token ever appears in an error, a log line or Debug output;
//!   endpoints are shown as configured, and an [`HttpUrl`] never carries credentials.
//!
//! Must not know what the keys mean: that is the coordination layer's (`coord` in the
//! gateway). It depends on the egress crate and on no crate of the gateway (the crate
//! graph holds it: this crate does not depend on `tunnelgate`). Its items are `pub` only
//! where the gateway uses them; `unreachable_pub` holds the rest private.
#![deny(unreachable_pub)]
#![cfg_attr(not(test), deny(clippy::too_many_lines))]

mod error;
mod watch;
mod wire;

#[cfg(test)]
mod tests;

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use http::{Method, StatusCode};
use serde_json::{json, Value};

pub use tunnelgate_egress::client::{Answer, Client, Egress, NackRetries, SendError};
use tunnelgate_egress::http_url::HttpUrl;
use tunnelgate_egress::proxy::ProxySetting;
use tunnelgate_egress::tls::TlsFiles;

pub use error::EtcdError;
use error::UNAVAILABLE;
pub use watch::Watch;
pub use wire::{CmpOp, Compare, EtcdStatus, KeyValue, Lease, Op, Txn, TxnResponse, WatchEvent, WatchKind};

/// How to reach etcd. `password` is the resolved secret; Debug never shows it.
#[derive(Clone)]
pub struct EtcdSettings {
    pub endpoints: Vec<HttpUrl>,
    pub username: Option<String>,
    pub password: Option<String>,
    pub tls: TlsFiles,
    /// The bound of one attempt on one endpoint (and of a watch's creation).
    pub request_timeout: Duration,
}

/// A cheap handle on one etcd client (clones share the connection pool and the token).
#[derive(Clone)]
pub struct Etcd {
    inner: Arc<Inner>,
}

struct Inner {
    http: Client,
    endpoints: Vec<HttpUrl>,
    /// `(name, password)`; never printed.
    credentials: Option<(String, String)>,
    token: Mutex<Token>,
    /// The index of the endpoint that answered last.
    current: AtomicUsize,
    request_timeout: Duration,
}

#[derive(Clone)]
enum Token {
    /// Credentials are set and no token is held: authenticate before the next call.
    Missing,
    /// No credentials, or etcd's authentication is off: send none.
    NotNeeded,
    /// Sent as `Authorization` (marked sensitive).
    Held(HeaderValue),
}

/// gRPC `NOT_FOUND`, `PERMISSION_DENIED`, `FAILED_PRECONDITION`.
const NOT_FOUND: i64 = 5;
const PERMISSION_DENIED: i64 = 7;
const FAILED_PRECONDITION: i64 = 9;

impl fmt::Debug for EtcdSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdSettings")
            .field("endpoints", &self.endpoints)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

impl fmt::Debug for Etcd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Etcd")
            .field("endpoints", &self.inner.endpoints)
            .field("username", &self.inner.credentials.as_ref().map(|(name, _)| name))
            .finish_non_exhaustive()
    }
}

impl Etcd {
    /// Builds the client (no request is made): no proxy, no redirects, the TLS files read
    /// now. Fails on no endpoint, a username without a password, or unusable TLS files.
    pub fn new(settings: EtcdSettings) -> Result<Etcd, EtcdError> {
        let setup = |reason: String| EtcdError::Setup { reason };
        if settings.endpoints.is_empty() {
            return Err(setup("no endpoint is configured".to_owned()));
        }
        let credentials = match (settings.username, settings.password) {
            (Some(name), Some(password)) => Some((name, password)),
            (None, None) => None,
            _ => {
                return Err(setup(
                    "a username needs a password, and a password a username".to_owned(),
                ))
            }
        };
        let tls = match tunnelgate_egress::tls::client_config(&settings.tls).map_err(|e| setup(e.to_string()))? {
            Some(tls) => tls,
            None => tunnelgate_egress::client::platform_config().map_err(|e| setup(e.to_string()))?,
        };
        let egress = Egress {
            tls,
            proxy: ProxySetting::Off,
            socket: None,
            connect_timeout: settings.request_timeout,
            idle: Duration::from_secs(50),
            retries: NackRetries::UpToTwo,
        };
        let first = url::Url::parse(settings.endpoints[0].as_str()).map_err(|e| setup(e.to_string()))?;
        let http = Client::new(egress, &first).map_err(|e| setup(e.to_string()))?;
        let token = if credentials.is_some() {
            Token::Missing
        } else {
            Token::NotNeeded
        };
        Ok(Etcd {
            inner: Arc::new(Inner {
                http,
                endpoints: settings.endpoints,
                credentials,
                token: Mutex::new(token),
                current: AtomicUsize::new(0),
                request_timeout: settings.request_timeout,
            }),
        })
    }

    /// The answering member's version and the cluster's leader (needs no credentials).
    pub async fn status(&self) -> Result<EtcdStatus, EtcdError> {
        let (bytes, at) = self.unary("/v3/maintenance/status", &json!({})).await?;
        let status: wire::StatusResponse = wire::decode(&bytes)?;
        Ok(status.into_status(self.inner.endpoints[at].to_string()))
    }

    /// Fetches a new token now: `Ok` at once without credentials, and `Ok` (no token) when
    /// etcd's authentication is off. A refusal of the credentials is [`EtcdError::Auth`].
    /// Calls authenticate by themselves when needed.
    pub async fn authenticate(&self) -> Result<(), EtcdError> {
        let Some((name, password)) = &self.inner.credentials else {
            return Ok(());
        };
        let body = json!({ "name": name, "password": password });
        let token = match self.unary("/v3/auth/authenticate", &body).await {
            Ok((bytes, _)) => wire::decode::<wire::AuthResponse>(&bytes)?.token,
            Err(EtcdError::Refused { code, message })
                if code == FAILED_PRECONDITION && message.contains("not enabled") =>
            {
                self.set_token(Token::NotNeeded);
                return Ok(());
            }
            Err(EtcdError::Refused { code, message }) if code != UNAVAILABLE => {
                return Err(EtcdError::Auth { reason: message })
            }
            Err(e) => return Err(e),
        };
        let mut value = HeaderValue::from_str(&token).map_err(|_| EtcdError::Decode {
            reason: "the token etcd issued is not a valid header value".to_owned(),
        })?;
        value.set_sensitive(true);
        self.set_token(Token::Held(value));
        Ok(())
    }

    /// A new lease of `ttl` (whole seconds, rounded up; etcd may raise it to its minimum).
    pub async fn grant_lease(&self, ttl: Duration) -> Result<Lease, EtcdError> {
        let grant: wire::GrantResponse = self.call("/v3/lease/grant", wire::grant_request(ttl)).await?;
        Ok(Lease {
            id: grant.id,
            ttl: Duration::from_secs(grant.ttl.max(0).unsigned_abs()),
        })
    }

    /// Renews `lease` once: `Some(its TTL again)`, or `None` when it expired or was revoked.
    pub async fn keep_alive(&self, lease: i64) -> Result<Option<Duration>, EtcdError> {
        let renewed: wire::KeepAliveResponse = self.call("/v3/lease/keepalive", wire::lease_request(lease)).await?;
        let ttl = renewed.result.ttl;
        Ok((ttl > 0).then(|| Duration::from_secs(ttl.unsigned_abs())))
    }

    /// Revokes `lease`, deleting the keys bound to it. A lease already gone is `Ok`.
    pub async fn revoke(&self, lease: i64) -> Result<(), EtcdError> {
        match self.call::<Value>("/v3/lease/revoke", wire::lease_request(lease)).await {
            Err(EtcdError::Refused { code: NOT_FOUND, .. }) => Ok(()),
            other => other.map(drop),
        }
    }

    pub async fn get(&self, key: &str) -> Result<Option<KeyValue>, EtcdError> {
        Ok(self.range(key, false).await?.into_iter().next())
    }

    /// Every key starting with `prefix`, in key order.
    pub async fn get_prefix(&self, prefix: &str) -> Result<Vec<KeyValue>, EtcdError> {
        self.range(prefix, true).await
    }

    /// Writes `key` (bound to `lease` if given); the store's revision after the write.
    pub async fn put(&self, key: &str, value: &[u8], lease: Option<i64>) -> Result<i64, EtcdError> {
        let put: wire::PutResponse = self.call("/v3/kv/put", wire::put_request(key, value, lease)).await?;
        Ok(put.header.revision)
    }

    /// Deletes `key`; how many keys were deleted (0 or 1).
    pub async fn delete(&self, key: &str) -> Result<u64, EtcdError> {
        self.delete_range(key, false).await
    }

    /// Deletes every key starting with `prefix`; how many were deleted.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<u64, EtcdError> {
        self.delete_range(prefix, true).await
    }

    pub async fn txn(&self, txn: Txn) -> Result<TxnResponse, EtcdError> {
        let bytes = self.authorized_bytes("/v3/kv/txn", wire::txn_request(&txn)).await?;
        wire::txn_response(&bytes)
    }

    /// Watches `key` from `start_revision` (or from now). Returns once etcd registered
    /// the watch, so every change after this returns is seen.
    pub async fn watch(&self, key: &str, start_revision: Option<i64>) -> Result<Watch, EtcdError> {
        self.open_watch(wire::watch_request(key, false, start_revision)).await
    }

    /// Watches every key starting with `prefix`, as [`Etcd::watch`] (the coordination
    /// watches single keys; the client's tests watch a prefix too).
    #[cfg(test)]
    pub(crate) async fn watch_prefix(&self, prefix: &str, start_revision: Option<i64>) -> Result<Watch, EtcdError> {
        self.open_watch(wire::watch_request(prefix, true, start_revision)).await
    }

    async fn range(&self, key: &str, prefix: bool) -> Result<Vec<KeyValue>, EtcdError> {
        let range: wire::RangeResponse = self.call("/v3/kv/range", wire::range_request(key, prefix)).await?;
        range.into_kvs()
    }

    async fn delete_range(&self, key: &str, prefix: bool) -> Result<u64, EtcdError> {
        let deleted: wire::DeleteResponse = self
            .call("/v3/kv/deleterange", wire::delete_request(key, prefix))
            .await?;
        Ok(deleted.deleted)
    }

    async fn call<T: serde::de::DeserializeOwned>(&self, path: &str, body: Value) -> Result<T, EtcdError> {
        wire::decode(&self.authorized_bytes(path, body).await?)
    }

    async fn authorized_bytes(&self, path: &str, body: Value) -> Result<bytes::Bytes, EtcdError> {
        let body = &body;
        self.authorized(move || async move { self.unary(path, body).await.map(|(bytes, _)| bytes) })
            .await
    }

    async fn open_watch(&self, body: Value) -> Result<Watch, EtcdError> {
        let body = &body;
        self.authorized(move || self.on_endpoints(move |at| self.watch_at(at, body)))
            .await
    }

    /// Runs `call` with a token when credentials are set; on a refusal of the token,
    /// authenticates once more and runs it again. A refusal that stays is `Auth`.
    async fn authorized<T, F, Fut>(&self, call: F) -> Result<T, EtcdError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, EtcdError>>,
    {
        if matches!(self.token(), Token::Missing) {
            self.authenticate().await?;
        }
        let first = call().await;
        let retry = matches!(&first, Err(EtcdError::Refused { message, .. }) if wire::needs_reauth(message));
        let outcome = if retry && self.inner.credentials.is_some() {
            self.set_token(Token::Missing);
            self.authenticate().await?;
            call().await
        } else {
            first
        };
        match outcome {
            Err(EtcdError::Refused { code, message }) if code == PERMISSION_DENIED || wire::needs_reauth(&message) => {
                let reason = match self.inner.credentials {
                    Some(_) => message,
                    None => format!("{message} (etcd requires authentication; no username is configured)"),
                };
                Err(EtcdError::Auth { reason })
            }
            other => other,
        }
    }

    /// POSTs `body` to `path`: the 2xx answer's bytes and the endpoint that gave them.
    async fn unary(&self, path: &str, body: &Value) -> Result<(bytes::Bytes, usize), EtcdError> {
        let body = serde_json::to_vec(body).expect("a JSON value serializes");
        let body = &body;
        self.on_endpoints(move |at| async move {
            // The bound spans the request and its answer's body.
            let exchange = async {
                let response = self.request(at, path, body.clone()).await?;
                let status = response.status();
                let bytes = read_all(response).await.map_err(|()| self.broken(at))?;
                self.answer(at, status, bytes).map(|bytes| (bytes, at))
            };
            tokio::time::timeout(self.inner.request_timeout, exchange)
                .await
                .unwrap_or_else(|_| Err(self.timeout(at)))
        })
        .await
    }

    /// Opens a watch stream on endpoint `at` and waits for etcd to register it.
    async fn watch_at(&self, at: usize, body: &Value) -> Result<Watch, EtcdError> {
        let body = serde_json::to_vec(body).expect("a JSON value serializes");
        let open = async {
            let response = self.request(at, "/v3/watch", body).await?;
            let status = response.status();
            if !status.is_success() {
                let bytes = read_all(response).await.map_err(|()| self.broken(at))?;
                return Err(self.refused(at, status, &bytes));
            }
            let mut watch = Watch::new(response, self.inner.endpoints[at].to_string());
            watch.created().await?;
            Ok(watch)
        };
        tokio::time::timeout(self.inner.request_timeout, open)
            .await
            .unwrap_or_else(|_| Err(self.timeout(at)))
    }

    /// Tries `attempt` on each endpoint in turn, from the one that answered last, while
    /// the error is a transport one; remembers the endpoint that answered.
    async fn on_endpoints<T, F, Fut>(&self, attempt: F) -> Result<T, EtcdError>
    where
        F: Fn(usize) -> Fut,
        Fut: Future<Output = Result<T, EtcdError>>,
    {
        let count = self.inner.endpoints.len();
        let start = self.inner.current.load(Ordering::Relaxed) % count;
        let mut last = None;
        for step in 0..count {
            let at = (start + step) % count;
            match attempt(at).await {
                Err(e) if e.tries_next() => {
                    tracing::debug!(endpoint = %self.inner.endpoints[at], error.kind = e.kind(), "etcd endpoint failed");
                    last = Some(e);
                }
                other => {
                    self.inner.current.store(at, Ordering::Relaxed);
                    return other;
                }
            }
        }
        Err(last.expect("there is at least one endpoint (checked by Etcd::new)"))
    }

    /// POSTs `body` to `path` on endpoint `at`, up to the answer's headers.
    async fn request(&self, at: usize, path: &str, body: Vec<u8>) -> Result<Answer, EtcdError> {
        let url = format!("{}{path}", self.inner.endpoints[at]);
        let uri = url.parse::<http::Uri>().map_err(|_| EtcdError::Setup {
            reason: format!("{} is not a URL the client can send to", self.inner.endpoints[at]),
        })?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Token::Held(token) = self.token() {
            headers.insert(AUTHORIZATION, token);
        }
        self.inner
            .http
            .send(Method::POST, &uri, headers, Bytes::from(body))
            .await
            .map_err(|e| self.transport(at, &e))
    }

    /// A 2xx answer's bytes, else the refusal it carries.
    fn answer(&self, at: usize, status: StatusCode, bytes: Bytes) -> Result<Bytes, EtcdError> {
        if status.is_success() {
            return Ok(bytes);
        }
        Err(self.refused(at, status, &bytes))
    }

    fn transport(&self, at: usize, error: &SendError) -> EtcdError {
        error::transport(self.inner.endpoints[at].as_str(), error)
    }

    /// The connection broke while the answer's body was read.
    fn broken(&self, at: usize) -> EtcdError {
        EtcdError::Unreachable {
            endpoint: self.inner.endpoints[at].to_string(),
            reason: "the connection was lost while the answer was read".to_owned(),
        }
    }

    fn timeout(&self, at: usize) -> EtcdError {
        EtcdError::Timeout {
            endpoint: self.inner.endpoints[at].to_string(),
        }
    }

    fn refused(&self, at: usize, status: StatusCode, bytes: &[u8]) -> EtcdError {
        error::refused(self.inner.endpoints[at].as_str(), status, bytes)
    }

    fn token(&self) -> Token {
        self.inner
            .token
            .lock()
            .expect("the token lock is never poisoned")
            .clone()
    }

    fn set_token(&self, token: Token) {
        *self.inner.token.lock().expect("the token lock is never poisoned") = token;
    }
}

/// An answer's whole body; `Err` when the connection broke first.
async fn read_all(mut answer: Answer) -> Result<Bytes, ()> {
    let mut body = Vec::new();
    while let Some(chunk) = answer.chunk().await.map_err(drop)? {
        body.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(body))
}
