//! `training.learner_threads: auto` on the CPU: the learner's libtorch
//! threads follow the cores the rest of the machine leaves it, measured.
//!
//! Every [`Governor::EVERY`] the trainer compares the machine's busy time
//! (`/proc/stat`) with its own process's (`/proc/self/stat`): the rest is
//! what the collectors, games, a local `nats-server` and anything else
//! running used. The learner gets the cores left, rounded to the nearest
//! whole core (at least 1): on a 2-core machine whose one collector uses a
//! quarter of a core, 2 threads; beside busy games or other jobs, 1.

use std::time::{Duration, Instant};

/// The machine's and this process's CPU counters at one moment, in the
/// kernel's clock ticks (the unit cancels out).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CpuSample {
    /// All CPUs' ticks, busy and idle (`/proc/stat`'s `cpu` line summed).
    pub total: u64,
    /// All CPUs' busy ticks: the `cpu` line less `idle` and `iowait`.
    pub busy: u64,
    /// This process's ticks, all threads, user and system.
    pub own: u64,
}

/// `/proc/stat`'s `cpu` line as `(total, busy)` ticks; `None` when the text
/// has no such line or it does not read.
pub(crate) fn parse_proc_stat(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> =
        line.split_whitespace().skip(1).map(str::parse).collect::<Result<_, _>>().ok()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice]:
    // guest time is already inside user and nice.
    let ticks = fields.get(..8)?;
    let total: u64 = ticks.iter().sum();
    Some((total, total - ticks[3] - ticks[4]))
}

/// A `/proc/PID/stat` line's `utime + stime` ticks; `None` when it does not
/// read. The command name (second field) may hold spaces and parentheses:
/// the fields are counted from its last `)`.
pub(crate) fn parse_pid_stat(text: &str) -> Option<u64> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After the name: state(3) ppid(4) … utime(14) stime(15).
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The CPU seconds this process has used, all threads (`/proc/self/stat`'s
/// `utime + stime`, in the ABI's fixed 100 ticks a second); `None` where
/// `/proc` does not say.
pub(crate) fn own_cpu_s() -> Option<f64> {
    let ticks = parse_pid_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    Some(ticks as f64 / 100.0)
}

/// `total` plus the CPU seconds between two readings of [`own_cpu_s`];
/// `None` from the first reading that failed on (a sum starts at
/// `Some(0.0)`).
pub(crate) fn add_interval(
    total: Option<f64>,
    before: Option<f64>,
    after: Option<f64>,
) -> Option<f64> {
    Some(total? + (after? - before?))
}

/// This moment's [`CpuSample`], or `None` where `/proc` does not say.
pub(crate) fn sample() -> Option<CpuSample> {
    let (total, busy) = parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)?;
    let own = parse_pid_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    Some(CpuSample { total, busy, own })
}

/// The cores (of `cores`) that processes other than this one used between
/// two samples; `None` when no tick passed.
pub(crate) fn others_cores(before: CpuSample, after: CpuSample, cores: usize) -> Option<f64> {
    let total = after.total.checked_sub(before.total).filter(|&t| t > 0)?;
    let busy = after.busy.saturating_sub(before.busy);
    let own = after.own.saturating_sub(before.own);
    Some(busy.saturating_sub(own) as f64 / total as f64 * cores as f64)
}

/// The learner's threads on `cores` cores when other processes use
/// `others` of them: the cores left, to the nearest whole one, 1 to `cores`.
pub(crate) fn threads_for(cores: usize, others: f64) -> usize {
    let left = (cores as f64 - others.max(0.0)).round();
    (left.max(1.0) as usize).min(cores.max(1))
}

/// Re-chooses the learner's threads from measured load ([`threads_for`]).
#[derive(Debug)]
pub(crate) struct Governor {
    cores: usize,
    threads: usize,
    /// When the load was last read, and what it read (`None`: `/proc`
    /// did not say).
    last: (Instant, Option<CpuSample>),
}

/// A change [`Governor::tick`] made: from, to, and the others' cores of
/// the machine's `cores`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Change {
    pub from: usize,
    pub to: usize,
    pub others: f64,
    pub cores: usize,
}

impl Governor {
    /// How often the load is measured (the window it is measured over).
    pub const EVERY: Duration = Duration::from_secs(10);

    /// A governor for a learner started with `threads` of `cores`.
    pub fn new(cores: usize, threads: usize) -> Self {
        Self { cores, threads, last: (Instant::now(), sample()) }
    }

    /// The threads the learner should use now, when [`Governor::EVERY`]
    /// has passed since the last measurement and the answer changed.
    pub fn tick(&mut self) -> Option<Change> {
        if self.last.0.elapsed() < Self::EVERY {
            return None;
        }
        let now = sample();
        let before = std::mem::replace(&mut self.last, (Instant::now(), now)).1;
        self.observe(before?, now?)
    }

    /// The change two samples call for (no change: `None`).
    pub fn observe(&mut self, before: CpuSample, after: CpuSample) -> Option<Change> {
        let others = others_cores(before, after, self.cores)?;
        let to = threads_for(self.cores, others);
        if to == self.threads {
            return None;
        }
        let change = Change { from: self.threads, to, others, cores: self.cores };
        self.threads = to;
        Some(change)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_line_is_summed_and_idle_and_iowait_are_not_busy() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let text = "cpu  100 5 40 800 30 2 3 0 7 0\ncpu0 50 2 20 400 15 1 1 0 0 0\nintr 1 2\n";
        // total 100+5+40+800+30+2+3+0 = 980; busy 980-800-30 = 150
        assert_eq!(parse_proc_stat(text), Some((980, 150)));
        assert_eq!(parse_proc_stat("cpu0 1 2 3 4 5 6 7 8\n"), None);
        assert_eq!(parse_proc_stat("cpu  1 2 3\n"), None);
        assert_eq!(parse_proc_stat("cpu  1 2 x 4 5 6 7 8\n"), None);
    }

    #[test]
    fn cpu_intervals_add_up_and_a_failed_reading_stays_unknown() {
        let t = add_interval(Some(0.0), Some(10.0), Some(10.5));
        assert_eq!(t, Some(0.5));
        assert_eq!(add_interval(t, Some(20.0), Some(20.25)), Some(0.75));
        assert_eq!(add_interval(t, None, Some(20.25)), None);
        assert_eq!(add_interval(None, Some(1.0), Some(2.0)), None, "unknown stays unknown");
        // Real readings of this process (other tests' threads count too):
        // they never go back.
        let a = own_cpu_s().unwrap();
        let t0 = std::time::Instant::now();
        while t0.elapsed() < std::time::Duration::from_millis(30) {}
        let b = own_cpu_s().unwrap();
        assert!(b >= a, "{a} → {b}");
    }

    #[test]
    fn a_process_stat_reads_utime_plus_stime_past_a_name_with_spaces() {
        let text = "4242 (rulka (x) torch) S 1 4242 4242 0 -1 4194560 9 0 0 0 1234 56 7 8 20 0 3\n";
        assert_eq!(parse_pid_stat(text), Some(1290));
        assert_eq!(parse_pid_stat("4242 (short) S 1 2"), None);
        assert_eq!(parse_pid_stat("no name here"), None);
    }

    #[test]
    fn this_machines_proc_files_read() {
        let s = sample().expect("/proc/stat and /proc/self/stat read on Linux");
        assert!(s.total > 0 && s.busy <= s.total, "{s:?}");
        let text = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
        let cpus = text.lines().filter(|l| l.starts_with("cpu") && !l.starts_with("cpu ")).count();
        assert!(cpus >= 1, "{text}");
    }

    #[test]
    fn others_are_the_machines_busy_time_less_this_processes() {
        let a = CpuSample { total: 1000, busy: 300, own: 100 };
        // 200 ticks of the 2 CPUs' clock: busy 150, of which 120 this process's.
        let b = CpuSample { total: 1200, busy: 450, own: 220 };
        let o = others_cores(a, b, 2).expect("ticks passed");
        assert!((o - 0.3).abs() < 1e-12, "{o}"); // (150 - 120) / 200 × 2
        assert_eq!(others_cores(a, a, 2), None);
    }

    #[test]
    fn the_learner_gets_the_cores_left_rounded_at_least_one() {
        assert_eq!(threads_for(2, 0.3), 2); // one light collector on 2 cores
        assert_eq!(threads_for(2, 0.6), 1); // 1.4 left
        assert_eq!(threads_for(2, 0.5), 2); // 1.5 rounds up
        assert_eq!(threads_for(2, 3.0), 1); // a loaded machine: still 1
        assert_eq!(threads_for(16, 12.2), 4);
        assert_eq!(threads_for(4, -0.1), 4);
        assert_eq!(threads_for(0, 0.0), 1);
    }

    #[test]
    fn the_governor_measures_only_once_its_window_has_passed() {
        // A threads count no measurement can give: any measurement is a change.
        let zero = CpuSample { total: 0, busy: 0, own: 0 };
        let mut g = Governor { cores: 2, threads: 99, last: (Instant::now(), Some(zero)) };
        assert_eq!(g.tick(), None, "measured at once");
        // The documented window, in seconds: 9 s after the last measurement
        // none is due, 10 s after it one is.
        g.last.0 = Instant::now() - Duration::from_secs(9);
        assert_eq!(g.tick(), None, "measured before its 10 s");
        g.last.0 = Instant::now() - Duration::from_secs(10) - Duration::from_millis(1);
        assert!(g.tick().is_some(), "not measured after its 10 s");
    }

    #[test]
    fn the_governor_says_a_change_once() {
        let mut g = Governor { cores: 2, threads: 1, last: (Instant::now(), None) };
        let a = CpuSample { total: 0, busy: 0, own: 0 };
        let light = CpuSample { total: 200, busy: 150, own: 120 }; // others 0.3
        let c = g.observe(a, light).expect("1 → 2");
        assert_eq!((c.from, c.to), (1, 2));
        assert!((c.others - 0.3).abs() < 1e-12);
        let light2 = CpuSample { total: 400, busy: 300, own: 240 };
        assert_eq!(g.observe(light, light2), None);
        let heavy = CpuSample { total: 600, busy: 500, own: 300 }; // others 1.4
        let c = g.observe(light2, heavy).expect("2 → 1");
        assert_eq!((c.from, c.to), (2, 1));
    }
}
