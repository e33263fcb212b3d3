//! What a run did: the counters, `summary.json` (written with every
//! checkpoint, `stop_reason: running` until the stop, so it always describes
//! the state `LATEST` names), and the summary shown to the user at the stop
//! (`rulka train` prints it on stdout).

use std::path::Path;

use rulka_config::{Config, GameCounters};
use rulka_learner::Learner;
use serde::Serialize;

use crate::intake::Intake;
use crate::progress::Progress;
use crate::transport::Broker;

/// The run's counters (`summary.json`'s `counters`).
#[derive(Debug, Default, Serialize)]
pub(crate) struct Counters {
    pub broker_restarts: u64,
    pub broker_connection_drops: u64,
    pub weights_published: u64,
    pub weight_publish_failures: u64,
    pub remote_rejoins: u64,
    pub game_launches: Option<u64>,
    pub game_hangs: Option<u64>,
    pub game_crashes: Option<u64>,
    pub game_desyncs: Option<u64>,
    pub game_scheduled_restarts: Option<u64>,
    pub game_failed_launches: Option<u64>,
    pub trajectories_received: u64,
    pub trajectories_trained: u64,
    pub eval_trajectories: u64,
    pub duplicate_trajectories: u64,
    pub missing_trajectories: u64,
    /// Recorded by an earlier trainer of the run and delivered again (it
    /// died between recording and acknowledging them): not recorded twice.
    pub already_recorded: u64,
    pub incomplete_dropped: u64,
    pub orphan_chunks: u64,
    pub unused_at_shutdown: u64,
    pub collector_restarts: u64,
    pub hung_collectors_killed: u64,
    pub ring_drops: u64,
    pub repeats_ignored: u64,
    pub rejected_chunks: u64,
    pub updates: u64,
    /// Wall seconds this start's updates took.
    pub learner_update_s: f64,
    /// CPU seconds the trainer process spent (on all its threads) while
    /// this start's updates ran: the learner's compute per frame is this
    /// over the frames trained on; `None` where `/proc` does not say (the
    /// trainer starts it at `Some(0.0)`).
    pub learner_cpu_s: Option<f64>,
    pub skipped_optimizer_steps: u64,
    /// This start's finished races (exploration and greedy).
    #[serde(flatten)]
    pub races: rulka_run::RunFigures,
}

impl Counters {
    /// The intake's counts: trajectories delivered twice, and gaps that no
    /// abandoned trajectory explains.
    pub fn intake(&mut self, intake: &Intake) {
        self.duplicate_trajectories = intake.duplicates();
        self.missing_trajectories = intake.missing();
    }

    /// The games' totals over `n_games` collectors with games.
    pub fn games(&mut self, n_games: u64, g: &GameCounters) {
        if n_games > 0 {
            self.game_launches = Some(g.launches);
            self.game_hangs = Some(g.hangs);
            self.game_crashes = Some(g.crashes);
            self.game_desyncs = Some(g.desyncs);
            self.game_scheduled_restarts = Some(g.scheduled_restarts);
            self.game_failed_launches = Some(g.failed_launches);
        }
    }
}

/// Everything the stop reports.
#[derive(Debug)]
pub(crate) struct Report<'a> {
    pub cfg: &'a Config,
    pub run_dir: &'a Path,
    pub stop_reason: &'a str,
    /// The last checkpoint's state (`state/state.N…`), if one was written.
    pub checkpoint: Option<&'a str>,
    pub minutes: f64,
    pub start_frames: u64,
    /// This start of the run, and the run's kept timeline with it.
    pub start: u32,
    pub timeline: crate::trainer::Timeline,
    pub learner: &'a Learner,
    pub counters: &'a Counters,
    pub progress: &'a Progress,
    /// The recorders' entries ([`crate::journal::Journal::summaries`]).
    pub recorded: serde_json::Map<String, serde_json::Value>,
    pub broker: Option<&'a Broker>,
    pub collectors: Vec<serde_json::Value>,
    pub games: (u64, GameCounters),
}

impl Report<'_> {
    fn fps(&self) -> f64 {
        (self.learner.frames - self.start_frames) as f64 / (self.minutes * 60.0).max(1e-9)
    }

    /// Writes `RUN_DIR/summary.json` atomically.
    pub fn write_json(&self) -> anyhow::Result<()> {
        rulka_checkpoint::write_atomic(
            &crate::RunDir::new(self.run_dir).summary_json(),
            serde_json::to_string_pretty(&self.to_json())?.as_bytes(),
        )?;
        Ok(())
    }

    /// `summary.json`'s content.
    pub fn to_json(&self) -> serde_json::Value {
        let (learner, all, last_eval) =
            (self.learner, &self.progress.all, &self.progress.last_eval);
        serde_json::json!({
            "stop_reason": self.stop_reason,
            "checkpoint": self.checkpoint,
            "start": self.start,
            "timeline": self.timeline,
            "algorithm": format!("{:?}", self.cfg.training.algorithm).to_lowercase(),
            "frames": learner.frames,
            "frames_this_run": learner.frames - self.start_frames,
            "minutes": self.minutes,
            "frames_per_second": self.fps(),
            "updates": learner.updates,
            "mean_progress_all": all.mean(all.progress),
            "last_eval_progress": last_eval.mean(last_eval.progress),
            "heldout": self.recorded.get("heldout"),
            "counters": self.counters,
            "broker": self.broker.map(|b| serde_json::json!({
                "url": b.url,
                "trainer_epoch": b.epoch,
                "connected_at_stop": b.status().connected,
                "restarts": b.restarts(),
                "connection_drops": b.status().drops,
            })),
            "collectors": self.collectors,
        })
    }
}

/// The summary shown to the user at the stop (what `rulka train` prints).
impl std::fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (c, learner, stop_reason) = (self.counters, self.learner, self.stop_reason);
        writeln!(f, "rulka train — {stop_reason} after {:.1} min", self.minutes)?;
        writeln!(
            f,
            "  frames        {} ({:.0}/s this run), updates {}",
            learner.frames,
            self.fps(),
            learner.updates
        )?;
        if c.updates > 0 {
            let frames = (learner.frames - self.start_frames).max(1) as f64;
            writeln!(
                f,
                "  learner       {:.0} s in updates{}",
                c.learner_update_s,
                c.learner_cpu_s.map_or(String::new(), |cpu| format!(
                    ", {cpu:.0} CPU s ({:.2} CPU ms a frame)",
                    1000.0 * cpu / frames
                ))
            )?;
        }
        writeln!(f, "  trajectories  {} received: {} trained, {} eval, {} after the last update; duplicates {}, missing {}; incomplete at collector exits {}{}",
            c.trajectories_received,
            c.trajectories_trained,
            c.eval_trajectories,
            c.unused_at_shutdown,
            c.duplicate_trajectories,
            c.missing_trajectories,
            c.incomplete_dropped,
            if c.already_recorded > 0 {
                format!("; {} recorded before the resume came again (recorded once)", c.already_recorded)
            } else {
                String::new()
            }
        )?;
        writeln!(
            f,
            "  races         {} finished (first at frame {}), best {}",
            c.races.finishes,
            c.races.first_finish_frame.map_or("-".into(), |f| f.to_string()),
            c.races.best_race_time_s.map_or("-".into(), |t| format!("{t:.2} s"))
        )?;
        if let Some(h) = self.recorded.get("heldout") {
            self.heldout(f, h)?;
        }
        writeln!(
            f,
            "  collectors    {} restarts ({} hung, {} remote rejoins)",
            c.collector_restarts, c.hung_collectors_killed, c.remote_rejoins
        )?;
        let (n_games, g) = &self.games;
        if *n_games > 0 {
            writeln!(f, "  games         {n_games}: {} launches, {} hung, {} crashed, {} desynced, {} failed to start, {} scheduled restarts",
                g.launches, g.hangs, g.crashes, g.desyncs, g.failed_launches, g.scheduled_restarts
            )?;
        }
        let mut broker_note = String::new();
        if let Some(b) = self.broker {
            writeln!(f, "  broker        {} (trainer epoch {}): {} restarts, {} connection drops, {} weight snapshots published ({} failed attempts)",
                b.url,
                b.epoch,
                c.broker_restarts,
                c.broker_connection_drops,
                c.weights_published,
                c.weight_publish_failures
            )?;
            let st = b.status();
            if !st.connected {
                broker_note = format!(
                    "; the NATS server {} was unreachable for the last {:.0} s (trajectories on it wait for --resume)",
                    b.url,
                    st.for_time.as_secs_f64()
                );
            }
        }
        writeln!(f, "  wrote         {}/model.onnx, weights.safetensors, state/, tensorboard/, trajectories.csv, summary.json", self.run_dir.display())?;
        writeln!(f, "  stopped       {stop_reason}{broker_note}")
    }
}

impl Report<'_> {
    fn heldout(&self, f: &mut std::fmt::Formatter<'_>, h: &serde_json::Value) -> std::fmt::Result {
        let last = &h["final"];
        writeln!(f, "  held-out      {} evaluation(s) on {} tracks {}; the last: finished {:.1}%, median race time {} s, {}× the autopilot's",
            h["evaluations"],
            h["tracks"].as_str().unwrap_or(""),
            h["seeds"].as_str().unwrap_or(""),
            100.0 * last["finish_rate"].as_f64().unwrap_or(f64::NAN),
            last["race_time_median_s"].as_f64().map_or("-".into(), |t| format!("{t:.2}")),
            last["time_ratio_median"].as_f64().map_or("-".into(), |t| format!("{t:.3}")),
        )?;
        let b = &h["best"];
        if b.is_object() {
            writeln!(f, "  best          {}/best.onnx from {:.1} min: finished {:.1}%, {}× the autopilot's on these tracks (they chose it: judge it on others with `rulka eval --seeds`)",
                self.run_dir.display(),
                b["minutes"].as_f64().unwrap_or(f64::NAN),
                100.0 * b["finish_rate"].as_f64().unwrap_or(f64::NAN),
                b["time_ratio_median"].as_f64().map_or("-".into(), |t| format!("{t:.3}")),
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rulka_shm::TrajectoryId;

    use super::*;

    /// One duplicate and two missing trajectories reach `summary.json`'s
    /// counters under their own names.
    #[test]
    fn the_intakes_duplicates_and_missing_are_counted_under_their_names() {
        let mut intake = Intake::default();
        for s in [0, 1, 4, 1] {
            intake.arrive(TrajectoryId { collector: 0, incarnation: 0, sequence: s });
        }
        let mut c = Counters::default();
        c.intake(&intake);
        let v = serde_json::to_value(&c).expect("counters serialize");
        assert_eq!(
            (&v["duplicate_trajectories"], &v["missing_trajectories"]),
            (&serde_json::json!(1), &serde_json::json!(2)),
            "{v}"
        );
    }

    #[test]
    fn finishes_count_every_race_the_first_frame_and_the_best_time() {
        let mut c = Counters::default();
        // Counted through the owner (`RunFigures::add`), edges included: a
        // time that is none, zero, negative or not a number is no time.
        c.races.add(1000, Some(12.5));
        c.races.add(3000, Some(11.0));
        c.races.add(5000, None);
        c.races.add(6000, Some(0.0));
        c.races.add(6500, Some(-3.0));
        c.races.add(6800, Some(f64::NAN));
        c.races.add(7000, Some(11.75));
        assert_eq!(
            (c.races.finishes, c.races.first_finish_frame, c.races.best_race_time_s),
            (7, Some(1000), Some(11.0))
        );
    }

    #[test]
    fn game_counters_appear_only_for_runs_with_games() {
        let g = GameCounters {
            launches: 3,
            hangs: 1,
            crashes: 2,
            desyncs: 4,
            scheduled_restarts: 5,
            failed_launches: 6,
            ..GameCounters::default()
        };
        let mut c = Counters::default();
        c.games(0, &g);
        assert_eq!(c.game_launches, None, "no collector had a game");
        c.games(1, &g);
        assert_eq!(
            (c.game_launches, c.game_hangs, c.game_crashes, c.game_desyncs),
            (Some(3), Some(1), Some(2), Some(4))
        );
        assert_eq!((c.game_scheduled_restarts, c.game_failed_launches), (Some(5), Some(6)));
    }

    /// `summary.json`: 6000 frames this run in 2 minutes are 50 frames/s;
    /// the stop reason, the state and the counters as given.
    #[test]
    fn the_summary_reports_this_runs_frame_rate_and_what_it_was_given() {
        let cfg = Config::default();
        let mut learner = Learner::new(&cfg, tch::Device::Cpu, 0);
        (learner.frames, learner.updates) = (9000, 7);
        let mut counters = Counters::default();
        counters.races.add(4000, Some(10.5));
        // 12 CPU s over this run's 6000 frames: 2 ms a frame (over all 9000
        // of a resumed run's frames it would read 1.33).
        (counters.updates, counters.learner_update_s, counters.learner_cpu_s) =
            (2, 10.0, Some(12.0));
        let progress = Progress::new();
        let r = Report {
            cfg: &cfg,
            run_dir: Path::new("run"),
            stop_reason: "running",
            checkpoint: Some("state/state.7.2"),
            minutes: 2.0,
            start_frames: 3000,
            start: 3,
            timeline: crate::trainer::Timeline {
                starts: 3,
                races: rulka_run::RunFigures {
                    finishes: 5,
                    first_finish_frame: Some(700),
                    best_race_time_s: Some(10.2),
                },
                thrown_away_trajectories: 9,
            },
            learner: &learner,
            counters: &counters,
            progress: &progress,
            recorded: serde_json::Map::new(),
            broker: None,
            collectors: vec![],
            games: (0, GameCounters::default()),
        };
        let v = r.to_json();
        assert_eq!(v["frames_per_second"], 50.0, "{v}");
        assert_eq!(
            (&v["frames"], &v["frames_this_run"], &v["updates"]),
            (&9000.into(), &6000.into(), &7.into())
        );
        assert_eq!(
            (&v["stop_reason"], &v["checkpoint"]),
            (&"running".into(), &"state/state.7.2".into())
        );
        assert_eq!(v["counters"]["best_race_time_s"], 10.5);
        let shown = r.to_string();
        assert!(shown.contains("9000 (50/s this run), updates 7"), "{shown}");
        assert!(shown.contains("12 CPU s (2.00 CPU ms a frame)"), "{shown}");
        assert!(!shown.contains("games ") && !shown.contains("held-out"), "{shown}");
        // Written where the run directory says, as shown.
        let dir = tempfile::tempdir().expect("tempdir");
        let r = Report { run_dir: dir.path(), ..r };
        r.write_json().expect("writes summary.json");
        let written: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).expect("read"))
                .expect("json");
        assert_eq!(written, v);
        // With games and held-out evaluations, their lines.
        let g = GameCounters { launches: 3, hangs: 1, crashes: 2, ..GameCounters::default() };
        let mut recorded = serde_json::Map::new();
        recorded.insert(
            "heldout".into(),
            serde_json::json!({"evaluations": 4, "tracks": "easy", "seeds": "100..104",
                "final": {"finish_rate": 0.75, "race_time_median_s": 11.25, "time_ratio_median": 1.0625},
                "best": {"minutes": 3.5, "finish_rate": 1.0, "time_ratio_median": 1.03125}}),
        );
        let r = Report { games: (2, g), recorded, ..r };
        let shown = r.to_string();
        assert!(shown.contains("games         2: 3 launches, 1 hung, 2 crashed"), "{shown}");
        assert!(
            shown.contains("4 evaluation(s) on easy tracks 100..104; the last: finished 75.0%, median race time 11.25 s, 1.062× the autopilot's"),
            "{shown}"
        );
        assert!(shown.contains("best.onnx from 3.5 min: finished 100.0%, 1.031×"), "{shown}");
    }
}
