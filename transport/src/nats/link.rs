//! The connection to a NATS server: deadlines on every call, its state
//! (connected, drops, reconnects) said once each way, JetStream handles.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv, object_store};
use async_nats::ConnectErrorKind;
use bytes::Bytes;
use tokio::runtime::Runtime;

use crate::TransportError;

use super::*;

/// What the connection is doing, kept up to date by the client's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NatsLinkStatus {
    /// Connected now.
    pub connected: bool,
    /// How long it has been in this state.
    pub for_time: Duration,
    /// Connections lost so far.
    pub drops: u64,
    /// Connections re-established so far.
    pub reconnects: u64,
}

#[derive(Debug)]
struct Health {
    connected: bool,
    since: Instant,
    drops: u64,
    reconnects: u64,
    /// When a lasting outage was last mentioned.
    said: Instant,
}

type Reporter = Arc<std::sync::Mutex<Box<dyn Fn(&str) + Send>>>;

fn say(r: &Reporter, msg: &str) {
    if let Ok(f) = r.lock() {
        f(msg);
    }
}

/// A connection: a client and a JetStream context on a runtime of their own
/// (one worker thread: pings, reconnects and acks go on between calls).
/// Every call waits at most its deadline; a lost connection is said once,
/// its return once, and a lasting outage every [`UNREACHABLE_REMINDER`]
/// (through [`NatsLink::set_reporter`], standard error by default).
#[derive(Clone)]
pub struct NatsLink {
    pub(super) rt: Arc<Runtime>,
    client: async_nats::Client,
    pub(super) js: jetstream::Context,
    pub(super) url: String,
    health: Arc<std::sync::Mutex<Health>>,
    reporter: Reporter,
}

impl std::fmt::Debug for NatsLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").field("url", &self.url).finish_non_exhaustive()
    }
}

impl NatsLink {
    /// Connects (within 10 s); authorization and TLS failures are named.
    pub fn connect(o: &NatsOptions) -> Result<Self, TransportError> {
        if !crate::host_is_little_endian() {
            return Err(TransportError::Invalid(
                "rulka's chunks are little-endian; this host is big-endian".into(),
            ));
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("rulka-nats")
            .enable_all()
            .build()
            .map_err(|e| nats_err("starting the runtime", e))?;
        let health = Arc::new(std::sync::Mutex::new(Health {
            connected: true,
            since: Instant::now(),
            drops: 0,
            reconnects: 0,
            said: Instant::now(),
        }));
        let name = if o.name.is_empty() { "rulka".to_string() } else { o.name.clone() };
        let reporter: Reporter = Arc::new(std::sync::Mutex::new(Box::new(move |m: &str| {
            tracing::info!("[{name}] {m}");
        })));
        let url = o.url.clone();
        let (h, r, u) = (health.clone(), reporter.clone(), url.clone());
        let mut opts = async_nats::ConnectOptions::new()
            .name(&o.name)
            .connection_timeout(Duration::from_secs(10))
            .request_timeout(Some(API_DEADLINE))
            .ping_interval(Duration::from_secs(5))
            .reconnect_delay_callback(|attempts| {
                Duration::from_millis((50 * attempts as u64).min(1000))
            })
            .event_callback(move |event| {
                let (h, r, u) = (h.clone(), r.clone(), u.clone());
                async move {
                    let msg = match event {
                        async_nats::Event::Disconnected => {
                            let Ok(mut h) = h.lock() else { return };
                            if !h.connected {
                                return;
                            }
                            h.connected = false;
                            h.since = Instant::now();
                            h.said = Instant::now();
                            h.drops += 1;
                            format!("NATS connection to {u} lost; reconnecting")
                        }
                        async_nats::Event::Connected => {
                            let Ok(mut h) = h.lock() else { return };
                            if h.connected {
                                return;
                            }
                            let down = h.since.elapsed();
                            h.connected = true;
                            h.since = Instant::now();
                            h.reconnects += 1;
                            format!("NATS connection to {u} back after {:.1} s", down.as_secs_f64())
                        }
                        _ => return,
                    };
                    say(&r, &msg);
                }
            });
        if let Some(t) = &o.token {
            opts = opts.token(t.clone());
        }
        if let (Some(u), Some(p)) = (&o.user, &o.password) {
            opts = opts.user_and_password(u.clone(), p.clone());
        }
        if let Some(tls) = &o.tls {
            opts = opts.require_tls(true);
            if let Some(ca) = &tls.ca {
                opts = opts.add_root_certificates(ca.clone());
            }
            if let (Some(c), Some(k)) = (&tls.cert, &tls.key) {
                opts = opts.add_client_certificate(c.clone(), k.clone());
            }
        }
        let client = rt.block_on(opts.connect(url.as_str())).map_err(|e| {
            let message = e.to_string();
            match e.kind() {
                ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
                    TransportError::Auth { url: url.clone(), message }
                }
                ConnectErrorKind::Tls => TransportError::Tls { url: url.clone(), message },
                _ if ["tls", "certificate", "handshake", "alert"]
                    .iter()
                    .any(|w| message.to_lowercase().contains(w)) =>
                {
                    TransportError::Tls { url: url.clone(), message }
                }
                // A TLS client talking to a plain server reads its greeting as a corrupt record.
                ConnectErrorKind::Io if o.tls.is_some() => TransportError::Tls {
                    url: url.clone(),
                    message: format!("handshake failed (does the server offer TLS?): {message}"),
                },
                _ => nats_err(&format!("connecting to {url}"), message),
            }
        })?;
        let js = {
            let _in_runtime = rt.enter();
            jetstream::new(client.clone())
        };
        // A lasting outage is said again every UNREACHABLE_REMINDER.
        let (h, r, u) = (Arc::downgrade(&health), reporter.clone(), url.clone());
        rt.spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let Some(h) = h.upgrade() else { return };
                let msg = {
                    let Ok(mut h) = h.lock() else { return };
                    if h.connected || h.said.elapsed() < UNREACHABLE_REMINDER {
                        continue;
                    }
                    h.said = Instant::now();
                    format!(
                        "NATS {u} unreachable for {:.0} s, retrying",
                        h.since.elapsed().as_secs_f64()
                    )
                };
                say(&r, &msg);
            }
        });
        Ok(Self { rt: Arc::new(rt), client, js, url, health, reporter })
    }

    /// The server URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The server's largest accepted message, bytes.
    pub fn max_payload(&self) -> usize {
        self.client.server_info().max_payload
    }

    /// Where the connection's news goes (lost, back, still unreachable): a
    /// progress bar's printer, a log. Standard error by default.
    pub fn set_reporter(&self, f: impl Fn(&str) + Send + 'static) {
        if let Ok(mut r) = self.reporter.lock() {
            *r = Box::new(f);
        }
    }

    /// What the connection is doing now.
    pub fn status(&self) -> NatsLinkStatus {
        match self.health.lock() {
            Ok(h) => NatsLinkStatus {
                connected: h.connected,
                for_time: h.since.elapsed(),
                drops: h.drops,
                reconnects: h.reconnects,
            },
            Err(_) => NatsLinkStatus {
                connected: true,
                for_time: Duration::ZERO,
                drops: 0,
                reconnects: 0,
            },
        }
    }

    /// `Err(Unreachable)` while the connection is down, so that a caller
    /// that must not wait (the trainer's loop, a collector) skips the call.
    pub(super) fn ensure_connected(&self, op: &str) -> Result<(), TransportError> {
        let s = self.status();
        if s.connected {
            Ok(())
        } else {
            Err(TransportError::Unreachable {
                op: op.to_string(),
                url: self.url.clone(),
                down_for: s.for_time,
            })
        }
    }

    /// Runs `f` on the link's runtime for at most `limit`.
    pub(super) fn call<T, F>(&self, op: &str, limit: Duration, f: F) -> Result<T, TransportError>
    where
        F: std::future::Future<Output = Result<T, TransportError>>,
    {
        let r = self.rt.block_on(async {
            tokio::time::timeout(limit, f).await.unwrap_or_else(|_| {
                Err(TransportError::Timeout {
                    op: op.to_string(),
                    url: self.url.clone(),
                    after: limit,
                })
            })
        });
        // The client's own request timeout is a timeout too, said as one.
        match r {
            Err(TransportError::Nats { op, message })
                if message.contains("timed out") || message.contains("TimedOut") =>
            {
                Err(TransportError::Timeout { op, url: self.url.clone(), after: API_DEADLINE })
            }
            r => r,
        }
    }

    fn lookup_err(
        &self,
        names: &NatsRunNames,
        what: &str,
        e: impl std::error::Error + 'static,
    ) -> TransportError {
        if is_not_found(&e) {
            TransportError::NoRun {
                run: names.run.clone(),
                url: self.url.clone(),
                message: format!("no {what} (is its trainer started?)"),
            }
        } else {
            nats_err(&format!("opening the run's {what}"), e)
        }
    }

    pub(super) async fn kv(&self, names: &NatsRunNames) -> Result<kv::Store, TransportError> {
        self.js
            .get_key_value(&names.kv)
            .await
            .map_err(|e| self.lookup_err(names, "key-value bucket", e))
    }

    pub(super) async fn objects(
        &self,
        names: &NatsRunNames,
    ) -> Result<object_store::ObjectStore, TransportError> {
        self.js
            .get_object_store(&names.objects)
            .await
            .map_err(|e| self.lookup_err(names, "object store", e))
    }
}

/// Counts, with compare-and-set, the starts of whatever `key` names (a
/// collector slot, the trainer): 0 on the first.
pub(super) async fn next_count(kv: &kv::Store, key: &str) -> Result<u32, TransportError> {
    for _ in 0..100 {
        let entry = kv.entry(key).await.map_err(|e| nats_err(&format!("reading {key}"), e))?;
        let (next, rev) = match &entry {
            Some(e) if e.operation == kv::Operation::Put => {
                let n: u32 =
                    std::str::from_utf8(&e.value).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
                (n + 1, e.revision)
            }
            Some(e) => (0, e.revision),
            None => (0, 0),
        };
        let value: Bytes = next.to_string().into();
        let r = if rev == 0 {
            kv.create(key, value).await.map(|_| ()).map_err(|e| e.to_string())
        } else {
            kv.update(key, value, rev).await.map(|_| ()).map_err(|e| e.to_string())
        };
        if r.is_ok() {
            return Ok(next);
        }
    }
    Err(nats_err(&format!("counting {key}"), "100 concurrent updates in a row"))
}
