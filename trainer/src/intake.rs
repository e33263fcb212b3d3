//! Which trajectories arrived, per collector incarnation: new ones,
//! duplicates (delivered twice: never trained on twice), and the gaps —
//! trajectories not (yet) arrived below the newest one. A gap is *missing*
//! unless the trajectory was begun and abandoned (its collector or game died
//! mid-run: incomplete, not missing); a trajectory that arrives late (after
//! later ones: a transport hands chunks again after its ack wait) fills its
//! gap and is new, not a duplicate.
//!
//! The first trajectory seen of an incarnation starts its record (a resumed
//! trainer meets collectors mid-sequence); one below it that arrives later
//! is new too. A trajectory an earlier trainer of the run recorded
//! ([`Intake::recorded_before`], from `trajectories.csv`) that comes again
//! — it was recorded, not yet acknowledged, when that trainer died — is
//! [`Arrival::Recorded`]: neither recorded nor trained on again.

use std::collections::{BTreeMap, HashMap, HashSet};

use rulka_shm::TrajectoryId;

/// How a trajectory arrived ([`Intake::arrive`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Not seen before.
    New,
    /// Seen before: counted, never trained on twice.
    Duplicate,
    /// Recorded by an earlier trainer of the run: delivered again after a
    /// crash between recording and acknowledging it.
    Recorded,
}

/// Sequence numbers seen, as disjoint half-open ranges `start → end`.
#[derive(Debug, Default)]
struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    fn contains(&self, x: u64) -> bool {
        self.0.range(..=x).next_back().is_some_and(|(_, &end)| x < end)
    }

    /// Adds `x` (not yet contained), merging with its neighbours.
    fn insert(&mut self, x: u64) {
        let (mut start, mut end) = (x, x + 1);
        if let Some((&s, &e)) = self.0.range(..x).next_back() {
            if e == x {
                start = s;
                self.0.remove(&s);
            }
        }
        if let Some(e) = self.0.remove(&(x + 1)) {
            end = e;
        }
        self.0.insert(start, end);
    }

    /// Numbers between the lowest and the highest seen that were not.
    fn gaps(&self) -> u64 {
        let (Some((&lo, _)), Some((_, &hi))) = (self.0.first_key_value(), self.0.last_key_value())
        else {
            return 0;
        };
        let covered: u64 = self.0.iter().map(|(s, e)| e - s).sum();
        hi - lo - covered
    }

    fn is_gap(&self, x: u64) -> bool {
        let inside = self.0.first_key_value().is_some_and(|(&lo, _)| x >= lo)
            && self.0.last_key_value().is_some_and(|(_, &hi)| x < hi);
        inside && !self.contains(x)
    }
}

/// The trainer's record of arrivals (see the module docs).
#[derive(Debug, Default)]
pub struct Intake {
    seen: HashMap<(u32, u32), Ranges>,
    before: HashMap<(u32, u32), Ranges>,
    abandoned: HashSet<TrajectoryId>,
    duplicates: u64,
}

impl Intake {
    /// Notes trajectories the transport gave up as incomplete, as
    /// `RolloutSource::take_abandoned` gives them: `(collector, packed id)`.
    pub fn abandoned(&mut self, ids: impl IntoIterator<Item = (u32, u64)>) {
        self.abandoned.extend(ids.into_iter().map(|(c, t)| TrajectoryId::unpack(c, t)));
    }

    /// Notes the trajectories earlier trainers of the run recorded (their
    /// gaps are theirs: not counted as missing here).
    pub fn recorded_before(&mut self, ids: impl IntoIterator<Item = TrajectoryId>) {
        for id in ids {
            let r = self.before.entry((id.collector, id.incarnation)).or_default();
            if !r.contains(id.sequence) {
                r.insert(id.sequence);
            }
        }
    }

    /// Records one arrival.
    pub fn arrive(&mut self, id: TrajectoryId) -> Arrival {
        let key = (id.collector, id.incarnation);
        if self.before.get(&key).is_some_and(|r| r.contains(id.sequence))
            && !self.seen.get(&key).is_some_and(|r| r.contains(id.sequence))
        {
            return Arrival::Recorded;
        }
        let seen = self.seen.entry(key).or_default();
        if seen.contains(id.sequence) {
            self.duplicates += 1;
            return Arrival::Duplicate;
        }
        seen.insert(id.sequence);
        // Abandoned, then delivered whole after all (a late chunk completed it).
        self.abandoned.remove(&id);
        Arrival::New
    }

    /// Trajectories delivered more than once.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Gaps not explained by an abandoned trajectory: missing so far.
    pub fn missing(&self) -> u64 {
        let gaps: u64 = self.seen.values().map(Ranges::gaps).sum();
        let explained = self
            .abandoned
            .iter()
            .filter(|a| {
                self.seen.get(&(a.collector, a.incarnation)).is_some_and(|r| r.is_gap(a.sequence))
            })
            .count() as u64;
        gaps - explained
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(collector: u32, incarnation: u32, sequence: u64) -> TrajectoryId {
        TrajectoryId { collector, incarnation, sequence }
    }

    #[derive(Debug, Clone)]
    enum Event {
        Arrive(u32, u32, u64),
        Abandon(u32, u32, u64),
    }

    /// Arrivals in any order (late ones, repeats, below the first seen),
    /// trajectories given up at any point, and an earlier trainer's record,
    /// against a model of plain sets: each arrival's kind, then the
    /// duplicates and the missing.
    #[test]
    fn arrivals_duplicates_and_missing_are_the_models_of_plain_sets() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config, RngSeed, TestRunner};
        let key = (0u32..2, 0u32..2);
        let event = prop_oneof![
            4 => (key.clone(), 0u64..24).prop_map(|((c, i), s)| Event::Arrive(c, i, s)),
            1 => (key.clone(), 0u64..24).prop_map(|((c, i), s)| Event::Abandon(c, i, s)),
        ];
        let before = prop::collection::vec((key, 0u64..24), 0..10);
        let strategy = (before, prop::collection::vec(event, 0..60));
        let mut runner = TestRunner::new(Config {
            cases: 3000,
            rng_seed: RngSeed::Fixed(0x696e_7461),
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(&strategy, |(before, events)| {
                let mut intake = Intake::default();
                intake.recorded_before(before.iter().map(|&((c, i), s)| id(c, i, s)));
                let recorded: HashSet<(u32, u32, u64)> =
                    before.iter().map(|&((c, i), s)| (c, i, s)).collect();
                let (mut seen, mut abandoned) = (HashSet::new(), HashSet::new());
                let mut duplicates = 0;
                for e in &events {
                    match *e {
                        Event::Abandon(c, i, s) => {
                            intake.abandoned([(c, id(c, i, s).packed())]);
                            abandoned.insert((c, i, s));
                        }
                        Event::Arrive(c, i, s) => {
                            let want = if seen.contains(&(c, i, s)) {
                                duplicates += 1;
                                Arrival::Duplicate
                            } else if recorded.contains(&(c, i, s)) {
                                Arrival::Recorded
                            } else {
                                seen.insert((c, i, s));
                                Arrival::New
                            };
                            prop_assert_eq!(intake.arrive(id(c, i, s)), want, "{:?}", e);
                        }
                    }
                }
                // A gap: between the lowest and the highest seen of its
                // incarnation, not seen; missing unless given up.
                let mut missing = 0;
                for c in 0..2 {
                    for i in 0..2 {
                        let mine: Vec<u64> =
                            seen.iter().filter(|t| t.0 == c && t.1 == i).map(|t| t.2).collect();
                        let (Some(&lo), Some(&hi)) = (mine.iter().min(), mine.iter().max()) else {
                            continue;
                        };
                        missing += (lo..=hi)
                            .filter(|s| {
                                !seen.contains(&(c, i, *s)) && !abandoned.contains(&(c, i, *s))
                            })
                            .count() as u64;
                    }
                }
                prop_assert_eq!(intake.duplicates(), duplicates);
                prop_assert_eq!(intake.missing(), missing, "{:?} {:?}", before, events);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn gaps_duplicates_late_arrivals_and_abandoned_ones() {
        let mut i = Intake::default();
        for s in [0, 1, 2, 5] {
            assert_eq!(i.arrive(id(0, 0, s)), Arrival::New);
        }
        // 3 and 4 not (yet) there.
        assert_eq!(i.missing(), 2);
        assert_eq!(i.arrive(id(0, 0, 2)), Arrival::Duplicate);
        // 3 comes late: new, and no longer missing.
        assert_eq!(i.arrive(id(0, 0, 3)), Arrival::New);
        assert_eq!(i.missing(), 1);
        // 4 was abandoned (incomplete): not missing.
        i.abandoned([(0, id(0, 0, 4).packed())]);
        assert_eq!(i.missing(), 0);
        // Another incarnation and another collector keep their own records;
        // the first seen starts the record, one below it arriving later is new.
        assert_eq!(i.arrive(id(0, 1, 7)), Arrival::New);
        assert_eq!(i.arrive(id(1, 0, 4)), Arrival::New);
        assert_eq!(i.arrive(id(0, 1, 6)), Arrival::New);
        assert_eq!(i.arrive(id(0, 1, 9)), Arrival::New);
        assert_eq!(i.missing(), 1, "8 of incarnation 1");
        assert_eq!(i.arrive(id(0, 1, 6)), Arrival::Duplicate);
        assert_eq!(i.duplicates(), 2);
        // An abandoned one that is not in a gap explains nothing: far above
        // the newest, or the very next one after it.
        i.abandoned([(0, id(0, 1, 20).packed())]);
        assert_eq!(i.missing(), 1);
        i.abandoned([(0, id(0, 1, 10).packed())]);
        assert_eq!(i.missing(), 1, "10 is after the newest (9), not a gap");
    }

    /// The record stays one range per run of consecutive numbers, however
    /// they arrive: its size does not grow with a long run's trajectories.
    #[test]
    fn ranges_merge_with_both_neighbours() {
        let mut r = Ranges::default();
        for x in [0, 2, 4, 1, 3] {
            r.insert(x);
        }
        assert_eq!(r.0.into_iter().collect::<Vec<_>>(), [(0, 5)]);
        let mut r = Ranges::default();
        for x in [10, 12, 11, 20] {
            r.insert(x);
        }
        assert_eq!(r.0.into_iter().collect::<Vec<_>>(), [(10, 13), (20, 21)]);
    }

    #[test]
    fn trajectories_an_earlier_trainer_recorded_are_recorded_once() {
        let mut i = Intake::default();
        // The earlier trainer recorded 0..=3 and 6 of (collector 2, incarnation 1).
        i.recorded_before([0, 1, 2, 3, 6].map(|s| id(2, 1, s)));
        assert_eq!(i.arrive(id(2, 1, 3)), Arrival::Recorded, "delivered again after the crash");
        assert_eq!(i.arrive(id(2, 1, 3)), Arrival::Recorded);
        assert_eq!(i.arrive(id(2, 1, 4)), Arrival::New);
        assert_eq!(i.arrive(id(2, 1, 5)), Arrival::New);
        assert_eq!(i.arrive(id(2, 1, 6)), Arrival::Recorded);
        assert_eq!(i.arrive(id(2, 1, 4)), Arrival::Duplicate);
        // Another incarnation or collector with the same number is new.
        assert_eq!(i.arrive(id(2, 2, 3)), Arrival::New);
        assert_eq!(i.arrive(id(1, 1, 3)), Arrival::New);
        // The earlier trainer's gaps (its incomplete runs) are not missing here.
        i.recorded_before([id(3, 0, 0), id(3, 0, 9)]);
        assert_eq!((i.missing(), i.duplicates()), (0, 1));
    }
}
