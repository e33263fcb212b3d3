//! rulka's benchmarks, behind `rulka bench`. Each measures rulka against a
//! baseline in the same run and reports the ratio (machines are noisy; a
//! figure from another run is no baseline):
//!
//! - [`inference`]: every inference backend on the same weights (ONNX
//!   Runtime raw and through `PolicyEngine`, tch, PyTorch eager in Python
//!   when a `.venv` with torch is there), latency percentiles per batch size,
//!   the weight hot-swap's cost, a figure (`--plot`);
//! - [`learner`]: PPO update throughput against the same update in PyTorch,
//!   and a GRPO update's peak memory with and without micro-batching (each
//!   in a fresh `rulka` process: the binary runs itself again);
//! - [`parity`]: one PPO, GRPO and DPO update on CUDA against the same
//!   update on the CPU (fp32 and fp16 autocast), parameters compared;
//! - [`shm`]: the shared-memory ring and weight board against memcpy and
//!   the original's `multiprocessing.Queue`;
//! - [`transport`]: shared memory against NATS JetStream over loopback (a
//!   local `nats-server`), chunk throughput and latency, weight publish →
//!   visible.
//!
//! Each `run` writes its report to the writer it is given (`rulka bench`
//! gives stdout); the library itself prints nothing.
//!
//! ```no_run
//! // `rulka bench shm --seconds 2 --json shm.json`
//! rulka_bench::shm::run(2.0, Some(&"shm.json".into()), &mut std::io::stdout())?;
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod inference;
pub mod learner;
pub mod parity;
pub mod shm;
pub mod transport;
