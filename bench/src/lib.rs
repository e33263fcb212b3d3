//! rulka's benchmarks, behind `rulka bench`. Each measures rulka against a
//! baseline in the same run and reports the ratio (machines are noisy; a
//! figure from another run is no baseline):
//!
//! - [`run_inference`]: every inference backend on the same weights (ONNX
//!   Runtime raw and through `PolicyEngine`, tch, PyTorch eager in Python
//!   when a `.venv` with torch is there), latency percentiles per batch size,
//!   the weight hot-swap's cost, a figure (`--plot`);
//! - [`run_learner`]: PPO update throughput against the same update in PyTorch,
//!   and a GRPO update's peak memory with and without micro-batching (each
//!   in a fresh `rulka` process: the binary runs itself again);
//! - [`run_parity`]: one PPO, GRPO and DPO update on CUDA against the same
//!   update on the CPU (fp32 and fp16 autocast), parameters compared;
//! - [`run_shm`]: the shared-memory ring and weight board against memcpy and
//!   the original's `multiprocessing.Queue`;
//! - [`run_transport`]: shared memory against NATS JetStream over loopback (a
//!   local `nats-server`), chunk throughput and latency, weight publish →
//!   visible.
//!
//! Each `run_…` writes its report to the writer it is given (`rulka bench`
//! gives stdout); the library itself prints nothing.
//!
//! ```no_run
//! // `rulka bench shm --seconds 2 --json shm.json`
//! rulka_bench::run_shm(2.0, Some(&"shm.json".into()), &mut std::io::stdout())?;
//! # Ok::<(), anyhow::Error>(())
//! ```

mod inference;
mod learner;
mod parity;
mod shm;
mod transport;

pub use inference::{run_inference, InferenceArgs};
pub use learner::{learner_grpo_child, random_rollouts, run_learner, LearnerArgs};
pub use parity::{max_relative_difference, run_parity, ParityArgs, AMP_BOUND, FP32_BOUND};
pub use shm::run_shm;
pub use transport::{run_transport, TransportArgs};
