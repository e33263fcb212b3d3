//! Helpers shared by the shm integration tests.

#![allow(dead_code, clippy::unwrap_used)]

use std::sync::mpsc;
use std::time::Duration;

/// A scratch directory on the real tmpfs (`/dev/shm`), removed on drop.
pub fn shm_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("rulka-test-").tempdir_in("/dev/shm").unwrap()
}

/// Fails the test (exits the process) if not disarmed within `limit`: a
/// hang becomes a failure instead of a stuck CI job. `pids` are killed first.
#[derive(Debug)]
pub struct Watchdog(mpsc::Sender<()>);

impl Watchdog {
    pub fn new(
        name: &'static str,
        limit: Duration,
        pids: std::sync::Arc<std::sync::Mutex<Vec<u32>>>,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            if rx.recv_timeout(limit).is_err() {
                for &pid in pids.lock().unwrap().iter() {
                    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                }
                eprintln!("WATCHDOG: {name} did not finish within {limit:?}; failing");
                std::process::exit(101);
            }
        });
        Self(tx)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// Tiny deterministic RNG (xorshift64*), so test schedules are reproducible.
#[derive(Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
