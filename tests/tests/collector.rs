//! A real collector (simulator + ONNX Runtime engine) writing to a real ring
//! read by a test learner: chunks reassemble into whole trajectories with
//! consistent ids, groups, versions and step contents; a snapshot published
//! mid-run reaches the chunks' policy versions (the collector drives until it
//! has, however slowly a loaded machine swaps the new policy in).

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::sync::Arc;
use std::time::Duration;

use rulka_collector::{Collector, CollectorOptions, RunLayout};
use rulka_config::{ingredients, step_flags, Config};
use rulka_env::SimEnv;
use rulka_inference::{EngineOptions, ModelSource, PolicyEngine};
use rulka_learner::ActorCritic;
use rulka_shm::Reassembler;
use tch::Device;

fn cfg() -> Config {
    let mut c = Config::from_yaml_str(
        "nn: {image_width: 36, image_height: 36, float_hidden_dim: 16, dense_hidden_dim: 32}\n\
         environment: {n_zone_centers_in_inputs: 4, n_prev_actions_in_inputs: 2, \
         cutoff_rollout_if_race_not_finished_within_duration_ms: 3000, sim: {track: easy, track_seeds: [5, 9]}}\n\
         collectors: {chunk_steps: 16, ring_chunks: 4, eval_every_n_rollouts: 3}",
        "t",
    )
    .unwrap();
    c.inference.intra_op_threads = rulka_test_support::margin::threads() as u32;
    c
}

/// A sampling policy engine (seed 1) on ONNX Runtime for the model `onnx`.
fn sampling_engine(cfg: &Config, onnx: Vec<u8>) -> PolicyEngine {
    let rt = rulka_inference::load_runtime(None).unwrap();
    PolicyEngine::new(
        rt,
        cfg,
        ModelSource::Bytes(onnx),
        0,
        EngineOptions { greedy: false, seed: 1 },
    )
    .unwrap()
}

/// Run `run_id`'s ring `ring_id` and weight board under `dir`, the board
/// holding a fresh network (seed 3) as version 0, and that network's ONNX
/// model (the board lives as long as the returned writer).
fn rig(
    cfg: &Config,
    dir: &std::path::Path,
    run_id: u64,
    ring_id: u32,
) -> (RunLayout, rulka_shm::RingConsumer, rulka_shm::BoardWriter, Vec<u8>) {
    let run = RunLayout::new(cfg, dir, run_id);
    let ring = rulka_shm::RingConsumer::create(&run.ring(ring_id)).unwrap();
    let mut board = rulka_shm::BoardWriter::create(&run.board()).unwrap();
    let w = ActorCritic::new(cfg, Device::Cpu, 3).to_weights();
    board.publish(0, &w.to_safetensors(&rulka_checkpoint::Meta::new(cfg, 0)).unwrap()).unwrap();
    let onnx = rulka_export::export_onnx(cfg, &w).unwrap();
    (run, ring, board, onnx)
}

#[test]
fn collector_chunks_reassemble_into_consistent_trajectories() {
    let cfg = cfg();
    let dir = tempfile::tempdir().unwrap();
    let run = RunLayout::new(&cfg, dir.path(), 77);
    let mut ring = rulka_shm::RingConsumer::create(&run.ring(1)).unwrap();
    let mut board = rulka_shm::BoardWriter::create(&run.board()).unwrap();
    let net = ActorCritic::new(&cfg, Device::Cpu, 3);
    let w = net.to_weights();
    let meta = rulka_checkpoint::Meta::new(&cfg, 0);
    board.publish(0, &w.to_safetensors(&meta).unwrap()).unwrap();
    let onnx = rulka_export::export_onnx(&cfg, &w).unwrap();

    // The collector drives until the test has seen the new policy in a
    // trajectory (at least 7 rollouts): no bet on how fast it is swapped in.
    let stop = Arc::new(rulka_shm::AtomicU32::new(0));
    let stop2 = stop.clone();
    let ccfg = cfg.clone();
    let collector = std::thread::spawn(move || {
        let engine = sampling_engine(&ccfg, onnx);
        let opts = CollectorOptions {
            id: 1,
            incarnation: 2,
            max_rollouts: None,
            heartbeat: None,
            game_log: None,
        };
        let mut c = Collector::attach(&ccfg, &run, SimEnv::new(&ccfg), engine, opts).unwrap();
        c.run(|| stop2.load(rulka_shm::Ordering::Relaxed) != 0).unwrap()
    });

    let mut re = Reassembler::new(RunLayout::new(&cfg, dir.path(), 77).chunk);
    let mut trajs: Vec<rulka_shm::Trajectory> = Vec::new();
    let mut buf = Vec::new();
    let mut published = false;
    while trajs.len() < 7 || trajs.last().is_some_and(|t| t.policy_versions.1 == 0) {
        assert!(ring.pop_timeout(&mut buf, Duration::from_secs(60)), "collector stalled");
        if let Some(t) = re.push(&buf).unwrap() {
            trajs.push(t);
            if !published {
                // A new policy after the first trajectory: later chunks must carry it.
                let w2 = ActorCritic::new(&cfg, Device::Cpu, 4).to_weights();
                board.publish(1, &w2.to_safetensors(&meta).unwrap()).unwrap();
                published = true;
            }
        }
    }
    stop.store(1, rulka_shm::Ordering::Relaxed);
    let stats = collector.join().unwrap();
    assert!(stats.rollouts >= trajs.len() as u64, "{stats:?}");
    assert_eq!(re.stats().dropped_incomplete + re.stats().orphan_chunks, 0);
    let n_ing = ingredients::COUNT;
    for (r, t) in trajs.iter().enumerate() {
        assert_eq!(t.collector, 1);
        assert_eq!(t.trajectory, (2u64 << 40) | r as u64, "ids count rollouts per incarnation");
        assert_eq!(t.group, [9, 5][r % 2], "collector 1 starts the seed cycle at index 1");
        let n = t.steps.len();
        assert!(n >= 2);
        assert_eq!(t.steps.frames.len(), n * 36 * 36);
        assert_eq!(t.steps.floats.len(), n * cfg.float_input_dim());
        // Exactly one terminal step, the last; it says how the rollout ended.
        let last = t.steps.flags[n - 1];
        assert!(last & step_flags::TERMINAL != 0);
        assert!(t.steps.flags[..n - 1].iter().all(|f| f & step_flags::TERMINAL == 0));
        let greedy = (r + 1) % 3 == 0;
        assert!(t.steps.flags.iter().all(|f| (f & step_flags::GREEDY != 0) == greedy));
        // Race time advances by 50 ms per decision from 0.
        for k in 0..n {
            let time = t.steps.ingredients[k * n_ing + ingredients::RACE_TIME_MS];
            if k + 1 < n || last & step_flags::FINISHED == 0 {
                assert_eq!(time, 50.0 * k as f32, "step {k}");
            }
        }
        assert_eq!(t.steps.ingredients[ingredients::METERS], 0.0);
        // Cut off once above 3 s, at the 3050 ms decision, at the latest: 61
        // decisions and the terminal step.
        assert!(n <= 62, "{n} steps");
        assert!(t.steps.log_probs.iter().all(|l| l.is_finite() && *l <= 0.0));
    }
    let versions: Vec<u64> = trajs.iter().map(|t| t.policy_versions.1).collect();
    assert_eq!(versions[0], 0);
    assert_eq!(*versions.last().unwrap(), 1, "the published snapshot was picked up: {versions:?}");
    assert!(versions.windows(2).all(|w| w[0] <= w[1]));
}

/// Where [`Poisoned`] puts its non-finite value.
#[derive(Clone, Copy)]
enum Poison {
    Float(usize, f32),
    Ingredient(usize, f32),
}

/// The simulator with non-finite values put in: `(rollout, step, what)`,
/// rollouts counted by resets from 0.
struct Poisoned {
    sim: SimEnv,
    resets: u64,
    steps: u64,
    at: Vec<(u64, u64, Poison)>,
}

impl Poisoned {
    fn now(&self) -> Option<Poison> {
        let now = (self.resets.checked_sub(1)?, self.steps);
        self.at.iter().find(|(r, s, _)| (*r, *s) == now).map(|p| p.2)
    }
}

impl rulka_env::Environment for Poisoned {
    fn obs_sizes(&self) -> (usize, usize) {
        self.sim.obs_sizes()
    }
    fn reset(&mut self, seed: u64) -> Result<(), rulka_env::EnvError> {
        self.resets += 1;
        self.steps = 0;
        self.sim.reset(seed)
    }
    fn observe(&mut self, frame: &mut [u8], floats: &mut [f32]) -> Result<(), rulka_env::EnvError> {
        self.sim.observe(frame, floats)?;
        if let Some(Poison::Float(i, x)) = self.now() {
            floats[i] = x;
        }
        Ok(())
    }
    fn step(&mut self, actions: &[u8]) -> Result<rulka_env::Status, rulka_env::EnvError> {
        self.steps += 1;
        self.sim.step(actions)
    }
    fn ingredients(&self) -> [f32; ingredients::COUNT] {
        let mut ing = self.sim.ingredients();
        if let Some(Poison::Ingredient(i, x)) = self.now() {
            ing[i] = x;
        }
        ing
    }
}

/// An observation with +inf, -inf or NaN in a float, or inf in a reward
/// ingredient, quarantines its trajectory: counted, the value named with
/// its step, nothing of it on the ring; the clean rollouts arrive whole.
#[test]
fn non_finite_observations_quarantine_their_trajectory() {
    let cfg = cfg();
    let dir = tempfile::tempdir().unwrap();
    let (run, mut ring, _board, onnx) = rig(&cfg, dir.path(), 78, 0);
    let env = Poisoned {
        sim: SimEnv::new(&cfg),
        resets: 0,
        steps: 0,
        at: vec![
            (1, 3, Poison::Float(5, f32::INFINITY)),
            (3, 0, Poison::Float(0, f32::NEG_INFINITY)),
            (4, 7, Poison::Float(9, f32::NAN)),
            (6, 2, Poison::Ingredient(ingredients::RACE_TIME_MS, f32::INFINITY)),
        ],
    };
    let ccfg = cfg.clone();
    let layout = run.chunk;
    let collector = std::thread::spawn(move || {
        let engine = sampling_engine(&ccfg, onnx);
        let opts = CollectorOptions {
            id: 0,
            incarnation: 0,
            max_rollouts: Some(8),
            heartbeat: None,
            game_log: None,
        };
        let mut c = Collector::attach(&ccfg, &run, env, engine, opts).unwrap();
        c.run(|| false).unwrap()
    });
    let mut re = Reassembler::new(layout);
    let (mut buf, mut got) = (Vec::new(), Vec::new());
    // The ring is small: popped while the collector drives, then drained.
    loop {
        let finished = collector.is_finished();
        if !ring.pop_timeout(&mut buf, Duration::from_millis(20)) {
            if finished {
                break;
            }
            continue;
        }
        if let Some(t) = re.push(&buf).unwrap() {
            assert!(t.steps.floats.iter().all(|x| x.is_finite()), "trajectory {}", t.trajectory);
            assert!(t.steps.ingredients.iter().all(|x| x.is_finite()));
            got.push(t.trajectory);
        }
    }
    let stats = collector.join().unwrap();
    assert_eq!((stats.quarantined, stats.rollouts), (4, 4), "{stats:?}");
    let last = stats.last_quarantine.clone().unwrap();
    assert!(
        last.starts_with("ingredients.") && last.contains("= inf at step 2 of trajectory 6"),
        "{last}"
    );
    assert_eq!(got, [0, 2, 5, 7], "the clean rollouts, whole");
    assert_eq!(re.stats().dropped_incomplete + re.stats().orphan_chunks, 0);
}

/// A stop request while the ring is full abandons the chunk waiting for
/// room: when that chunk is a rollout's last, the rollout is not written
/// and must not be counted as one (a collector that counted it promised the
/// trainer a trajectory it never sent). Every rollout here is one chunk
/// (62 steps at most, 64 per chunk), the ring holds 4 and nothing reads
/// it: rollouts 0–3 are stored, rollout 4's only chunk waits for room and
/// the stop (asked once the producer has waited) abandons it.
#[test]
fn a_rollout_whose_last_chunk_a_stop_abandons_is_not_counted() {
    let mut cfg = cfg();
    cfg.collectors.chunk_steps = 64;
    cfg.collectors.ring_chunks = 4;
    cfg.collectors.block_timeout_ms = 20;
    let dir = tempfile::tempdir().unwrap();
    let (run, mut ring, _board, onnx) = rig(&cfg, dir.path(), 79, 0);
    let engine = sampling_engine(&cfg, onnx);
    let opts = CollectorOptions {
        id: 0,
        incarnation: 0,
        max_rollouts: None,
        heartbeat: None,
        game_log: None,
    };
    let mut c = Collector::attach(&cfg, &run, SimEnv::new(&cfg), engine, opts).unwrap();
    let stats = c.run(|| ring.stats().wait_ns > 0).unwrap();
    let (mut re, mut buf, mut whole) = (Reassembler::new(run.chunk), Vec::new(), 0u64);
    while ring.pop(&mut buf) {
        whole += u64::from(re.push(&buf).unwrap().is_some());
    }
    assert_eq!(whole, 4, "the ring holds four whole rollouts");
    assert_eq!((stats.rollouts, stats.chunks, stats.abandoned), (4, 4, 1), "{stats:?}");
}

/// A game waits for its client only `environment.tmi.timeout_during_run_ms`
/// inside a sync call, then disconnects it and the run is lost: a full
/// transport mid-run must never hold a collector up that long. Here the
/// game (`rulka sim serve`'s server, over TMInterface's protocol) allows
/// 300 ms, runs are 8 chunks long, and the ring of 4 is read by nobody for
/// 2 s: the chunks wait in the collector, the collector waits at the run's
/// end (the game then between runs), and both rollouts arrive whole and in
/// order, the game never having dropped its collector.
#[test]
fn a_full_transport_mid_run_never_makes_the_game_drop_its_collector() {
    use rulka_config::{EnvKind, MapEntry};
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = cfg();
    cfg.collectors.chunk_steps = 8;
    cfg.collectors.ring_chunks = 4;
    cfg.collectors.block_timeout_ms = 50;
    cfg.environment.kind = EnvKind::Tmi;
    cfg.environment.tmi.timeout_ms = 5_000;
    cfg.environment.tmi.timeout_during_run_ms = 300;
    for s in [5u64, 9] {
        let path = dir.path().join(format!("sim{s}.npy"));
        let track = rulka_env::Track::generate(s, cfg.environment.sim.track);
        rulka_env::write_points(&path, &rulka_env::reference_line(&track)).unwrap();
        cfg.environment.tmi.maps.push(MapEntry {
            name: format!("sim{s}"),
            map_path: s.to_string(),
            zone_centers: path,
            checkpoints: None,
        });
    }
    let server = rulka_env::SimServer::start(&cfg, 0, rulka_env::SimServerFault::None).unwrap();
    let (run, mut ring, _board, onnx) = rig(&cfg, dir.path(), 81, 0);
    let (ccfg, port, chunk) = (cfg.clone(), server.port(), run.chunk);
    let collector = std::thread::spawn(move || {
        let env = rulka_env::TmiEnv::connect(&ccfg, "127.0.0.1", port).unwrap();
        let engine = sampling_engine(&ccfg, onnx);
        let opts = CollectorOptions {
            id: 0,
            incarnation: 0,
            max_rollouts: Some(2),
            heartbeat: None,
            game_log: None,
        };
        let mut c = Collector::attach(&ccfg, &run, env, engine, opts).unwrap();
        c.run(|| false)
    });
    std::thread::sleep(Duration::from_secs(2));
    let (mut re, mut buf, mut trajs) = (Reassembler::new(chunk), Vec::new(), Vec::new());
    loop {
        let done = collector.is_finished();
        while ring.pop_timeout(&mut buf, Duration::from_millis(100)) {
            trajs.extend(re.push(&buf).unwrap());
        }
        if done {
            break;
        }
    }
    let stats = collector.join().unwrap().expect("the game never dropped its collector");
    assert_eq!((stats.rollouts, stats.abandoned), (2, 0), "{stats:?}");
    assert!(stats.ring_full_waits >= 1, "the ring was full mid-run: {stats:?}");
    assert_eq!(trajs.len(), 2, "{stats:?}");
    for (r, t) in trajs.iter().enumerate() {
        assert_eq!(t.trajectory, r as u64, "in order");
        let n = t.steps.len();
        assert!(n > 4 * 8, "{n} steps: longer than the ring holds");
        assert!(t.steps.flags[n - 1] & step_flags::TERMINAL != 0);
    }
    assert_eq!(re.stats().dropped_incomplete + re.stats().orphan_chunks, 0);
}

/// `collectors.curriculum` in a real collector: every greedy run keeps the
/// plain cycle, and every exploration run drives either the curriculum's
/// cycle's next track or — with temperature 1e-3 and no staleness, so a
/// replay takes the top rank — the track whose last exploration run had the
/// highest mean surprise, `-log π(a|s)`, recomputed here from the log-probs
/// the chunks carry. The cycle and the replay can coincide, so the cycle's
/// position is followed as a set of possibilities; an empty set is a run
/// the rule does not explain.
#[test]
fn a_curriculum_replays_the_track_whose_last_run_was_least_sure() {
    let mut cfg = cfg();
    cfg.environment.sim.track_seeds = vec![3, 5, 7, 9, 11, 13];
    cfg.collectors.eval_every_n_rollouts = 4;
    cfg.collectors.chunk_steps = 64;
    cfg.collectors.ring_chunks = 64;
    cfg.collectors.curriculum =
        rulka_config::CurriculumConfig { replay: 0.5, temperature: 1e-3, staleness: 0.0 };
    let dir = tempfile::tempdir().unwrap();
    let (run, mut ring, _board, onnx) = rig(&cfg, dir.path(), 80, 2);
    let ccfg = cfg.clone();
    let collector = std::thread::spawn(move || {
        let engine = sampling_engine(&ccfg, onnx);
        let opts = CollectorOptions {
            id: 2,
            incarnation: 0,
            max_rollouts: Some(48),
            heartbeat: None,
            game_log: None,
        };
        let mut c = Collector::attach(&ccfg, &run, SimEnv::new(&ccfg), engine, opts).unwrap();
        c.run(|| false).unwrap()
    });
    let mut re = Reassembler::new(RunLayout::new(&cfg, dir.path(), 80).chunk);
    let (mut trajs, mut buf) = (Vec::new(), Vec::new());
    while trajs.len() < 48 {
        assert!(ring.pop_timeout(&mut buf, Duration::from_secs(60)), "collector stalled");
        trajs.extend(re.push(&buf).unwrap());
    }
    let stats = collector.join().unwrap();
    let seeds = &cfg.environment.sim.track_seeds;
    let n = seeds.len();
    let mut scores: Vec<Option<f64>> = vec![None; n];
    let mut cycle = std::collections::BTreeSet::from([2usize]);
    let (mut only_replay, mut maybe_replay) = (0u64, 0u64);
    for (r, t) in trajs.iter().enumerate() {
        assert_eq!(t.trajectory & 0xFF_FFFF_FFFF, r as u64, "in order");
        let track = seeds.iter().position(|&s| s == t.group).unwrap();
        if (r + 1) % 4 == 0 {
            assert!(t.steps.flags.iter().all(|f| f & step_flags::GREEDY != 0));
            assert_eq!(track, (2 + r) % n, "greedy run {r} left the plain cycle");
            continue;
        }
        // The highest score, the lower index on a tie.
        let top = (0..n)
            .filter_map(|i| scores[i].map(|s| (i, s)))
            .fold(None, |b: Option<(usize, f64)>, (i, s)| match b {
                Some((_, bs)) if bs >= s => b,
                _ => Some((i, s)),
            })
            .map(|(i, _)| i);
        let mut next = std::collections::BTreeSet::new();
        for &p in &cycle {
            if p % n == track {
                next.insert(p + 1);
            }
            if top == Some(track) {
                next.insert(p);
            }
        }
        assert!(
            !next.is_empty(),
            "exploration run {r} drove track {track}: neither the cycle ({cycle:?} mod {n}) nor the top score ({top:?} of {scores:?})"
        );
        only_replay += u64::from(cycle.iter().all(|&p| p % n != track));
        maybe_replay += u64::from(top == Some(track));
        cycle = next;
        let lp = &t.steps.log_probs;
        scores[track] = Some(-lp.iter().map(|&l| f64::from(l)).sum::<f64>() / lp.len() as f64);
    }
    assert!(only_replay >= 3, "{only_replay} runs only a replay explains: {stats:?}");
    assert!(
        (only_replay..=maybe_replay).contains(&stats.replays),
        "{} replays counted, {only_replay}..={maybe_replay} seen",
        stats.replays
    );
}
