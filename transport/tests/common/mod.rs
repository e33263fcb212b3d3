//! Helpers for the NATS transport tests: a local server per test (own port,
//! own store directory), runs, chunks, and an in-test TCP proxy that can cut
//! connections.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rulka_shm::chunk::{ChunkHeader, ChunkLayout, Steps};
use rulka_transport::nats::{Link, NatsOptions, RunRecord, StreamLimits};
use rulka_transport::server::{LocalServer, ServerSpec, Users};

pub const LAYOUT: ChunkLayout =
    ChunkLayout { frame_len: 16, n_floats: 3, n_heads: 1, n_ingredients: 2, max_steps: 4 };

/// A collector outbox big enough for every test's chunks.
pub const OUTBOX: usize = 64 << 20;

pub fn server(dir: &std::path::Path, run: &str) -> LocalServer {
    LocalServer::start(ServerSpec {
        dir: dir.to_path_buf(),
        host: "127.0.0.1".into(),
        port: 0,
        users: Some(Users::random()),
        runs: vec![run.into()],
        tls: None,
        extra: String::new(),
        tied_to_parent: false,
    })
    .unwrap()
}

pub fn record(run: &str) -> RunRecord {
    RunRecord {
        run: run.into(),
        schema_hash: rulka_transport::nats::schema_hash(&LAYOUT),
        network_hash: "net0".into(),
        config_yaml: "training: {}\n".into(),
        rulka_version: "test".into(),
    }
}

pub fn limits(max_bytes: i64) -> StreamLimits {
    StreamLimits { max_bytes, max_per_collector: -1, ack_wait: Duration::from_secs(30) }
}

pub fn connect(o: &NatsOptions) -> Link {
    Link::connect(o).unwrap()
}

/// `n` steps whose floats encode (collector, trajectory, step) for checks.
pub fn steps(collector: u32, trajectory: u64, first: u64, n: usize) -> Steps {
    let mut s = Steps::default();
    for k in 0..n as u64 {
        s.frames.extend(std::iter::repeat_n((first + k) as u8, 16));
        s.floats.extend([collector as f32, (trajectory & 0xFFFF) as f32, (first + k) as f32]);
        s.actions.push(((first + k) % 12) as i32);
        s.log_probs.push(-1.0);
        s.values.push(0.5);
        s.ingredients.extend([1.0, 2.0]);
        s.flags.push(0);
    }
    s
}

/// The chunks of one trajectory of `len` steps.
pub fn trajectory(collector: u32, trajectory: u64, len: usize) -> Vec<(ChunkHeader, Steps)> {
    let mut out = Vec::new();
    let mut first = 0;
    while first < len {
        let n = (len - first).min(LAYOUT.max_steps);
        let h = ChunkHeader {
            collector,
            trajectory,
            group: 7,
            policy_version: 1,
            first_step: first as u64,
            is_last: first + n == len,
        };
        out.push((h, steps(collector, trajectory, first as u64, n)));
        first += n;
    }
    out
}

/// A TCP proxy between clients and `target` whose connections can be cut.
pub struct Proxy {
    pub port: u16,
    cut: Arc<Mutex<bool>>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    pub fn start(target: u16) -> Self {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let cut = Arc::new(Mutex::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (c2, k2) = (cut.clone(), conns.clone());
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(client) = s else { continue };
                if *c2.lock().unwrap() {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else { continue };
                k2.lock().unwrap().push(client.try_clone().unwrap());
                k2.lock().unwrap().push(server.try_clone().unwrap());
                for (mut a, mut b) in
                    [(client.try_clone().unwrap(), server.try_clone().unwrap()), (server, client)]
                {
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16384];
                        loop {
                            match a.read(&mut buf) {
                                Ok(0) | Err(_) => break,
                                Ok(n) => {
                                    if b.write_all(&buf[..n]).is_err() {
                                        break;
                                    }
                                }
                            }
                        }
                        let _ = b.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Self { port, cut, conns }
    }

    /// Cuts every connection and refuses new ones until [`Proxy::restore`].
    pub fn cut(&self) {
        *self.cut.lock().unwrap() = true;
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    pub fn restore(&self) {
        *self.cut.lock().unwrap() = false;
    }
}
