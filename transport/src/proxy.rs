//! A TCP relay on loopback whose connections can be cut, for fault tests
//! and the soak: it stands between collectors and a NATS server the way a
//! network does.
//!
//! - [`Proxy::cut`]: every connection is closed and new ones are refused
//!   (a server or router that resets connections).
//! - [`Proxy::blackhole`]: nothing is closed, but no byte moves and new
//!   connections are accepted and left waiting (a pulled cable: the peers
//!   notice only by their own timeouts; bytes in flight are delivered once
//!   the network is back, as TCP would retransmit them).
//! - [`Proxy::restore`]: traffic flows again.
//!
//! ```
//! use std::io::{Read, Write};
//! let echo = std::net::TcpListener::bind("127.0.0.1:0")?;
//! let target = echo.local_addr()?.port();
//! std::thread::spawn(move || {
//!     for s in echo.incoming().flatten() {
//!         let mut s = s;
//!         let mut b = [0u8; 5];
//!         if s.read_exact(&mut b).is_ok() {
//!             let _ = s.write_all(&b);
//!         }
//!     }
//! });
//! let proxy = rulka_transport::Proxy::start(target)?;
//! let mut c = std::net::TcpStream::connect(("127.0.0.1", proxy.port()))?;
//! c.write_all(b"hello")?;
//! let mut b = [0u8; 5];
//! c.read_exact(&mut b)?;
//! assert_eq!(&b, b"hello");
//! # Ok::<(), std::io::Error>(())
//! ```

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the relay does with traffic now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Open,
    Closed,
    Blackhole,
}

#[derive(Debug)]
struct State {
    mode: Mode,
    conns: Vec<TcpStream>,
}

/// A TCP relay from a loopback port to `127.0.0.1:target` (see the module docs).
#[derive(Debug, Clone)]
pub struct Proxy {
    port: u16,
    state: Arc<Mutex<State>>,
}

fn mode(state: &Mutex<State>) -> Mode {
    state.lock().map_or(Mode::Closed, |s| s.mode)
}

/// Waits while the network is blackholed; false when it is closed instead.
fn wait_open(state: &Mutex<State>) -> bool {
    loop {
        match mode(state) {
            Mode::Open => return true,
            Mode::Closed => return false,
            Mode::Blackhole => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, state: Arc<Mutex<State>>) {
    let mut buf = [0u8; 16384];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if !wait_open(&state) || to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

fn relay(client: TcpStream, target: u16, state: Arc<Mutex<State>>) {
    // A connection made while blackholed waits, as a SYN would be retried.
    if !wait_open(&state) {
        let _ = client.shutdown(Shutdown::Both);
        return;
    }
    let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) =
        (client.try_clone(), server.try_clone(), client.try_clone(), server.try_clone())
    else {
        return;
    };
    if let Ok(mut s) = state.lock() {
        s.conns.push(c3);
        s.conns.push(s3);
    }
    let st = state.clone();
    std::thread::spawn(move || pump(c2, s2, st));
    std::thread::spawn(move || pump(server, client, state));
}

impl Proxy {
    /// Listens on a free loopback port and relays each connection to
    /// `127.0.0.1:target`.
    pub fn start(target: u16) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(Mutex::new(State { mode: Mode::Open, conns: Vec::new() }));
        let st = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if mode(&st) == Mode::Closed {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let st = st.clone();
                std::thread::spawn(move || relay(client, target, st));
            }
        });
        Ok(Self { port, state })
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Closes every connection and refuses new ones until [`Proxy::restore`].
    pub fn cut(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.mode = Mode::Closed;
            for c in s.conns.drain(..) {
                let _ = c.shutdown(Shutdown::Both);
            }
        }
    }

    /// Moves no byte, closes nothing, until [`Proxy::restore`].
    pub fn blackhole(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.mode = Mode::Blackhole;
        }
    }

    /// Lets traffic flow again.
    pub fn restore(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.mode = Mode::Open;
            // Connections that ended meanwhile are gone from the list's point of view too.
            s.conns.retain(|c| c.peer_addr().is_ok());
        }
    }
}
