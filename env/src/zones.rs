//! Zone centres (virtual checkpoints, "VCPs") of a map, as the original's
//! `map_loader.py` and `game_instance_manager.py` use them: progress along the
//! track, the zone centres ahead that the float vector shows, the margin to
//! the finish and the no-progress cut-off all come from them.
//!
//! A map's reference line is its centreline sampled every 0.5 m (the
//! original's `maps/*.npy`, `N×3`, y up). [`ZoneMap::new`] does what
//! `load_next_map_zone_centers` and `precalculate_virtual_checkpoints_information`
//! do: extrapolate `n_before` points before the start and `n_after` after the
//! finish along the end segments, smooth `c[5..len−5] = ½(c[i−5] + c[i+5])`
//! (right-hand side from the unsmoothed line), then the transitions (midpoints
//! of consecutive centres), the segment lengths between transitions and their
//! running sums. The zone index starts at `n_before` (the start line) and
//! moves as `update_current_zone_idx` moves it ([`ZoneMap::update`]).

use rulka_config::Config;

/// The zone-related settings of a config.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ZoneParams {
    /// Points extrapolated before the start (the start zone's index).
    pub n_before: usize,
    /// Points extrapolated after the finish.
    pub n_after: usize,
    /// A zone is entered only within this distance of its centre:
    /// `√((distance_between_checkpoints/2)² + (road_width/2)²)`.
    pub max_dist_to_vcp: f64,
    /// Zone tracking only while the car is above this height (−∞: always).
    pub deck_height: f64,
    /// The float vector shows every this-many-th zone centre.
    pub every: usize,
    /// Zone centres in the float vector.
    pub n_inputs: usize,
    /// Cap of the margin-to-finish input, m.
    pub margin_cap: f64,
}

impl ZoneParams {
    /// The settings of `cfg.environment`.
    pub fn from_config(cfg: &Config) -> Self {
        let e = &cfg.environment;
        Self {
            n_before: e.n_zone_centers_extrapolate_before_start_of_map as usize,
            n_after: e.n_zone_centers_extrapolate_after_end_of_map as usize,
            max_dist_to_vcp: (e.distance_between_checkpoints / 2.0).hypot(e.road_width / 2.0),
            deck_height: e.deck_height.unwrap_or(f64::NEG_INFINITY),
            every: e.one_every_n_zone_centers_in_inputs as usize,
            n_inputs: e.n_zone_centers_in_inputs as usize,
            margin_cap: e.margin_to_announce_finish_meters,
        }
    }
}

/// Why a reference line cannot be a zone map.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ZoneError {
    /// Fewer than 2 points.
    #[error("a reference line needs at least 2 points; got {0}")]
    TooShort(usize),
    /// Two consecutive zone transitions coincide (repeated points).
    #[error("zone transitions {0} and {1} coincide (repeated reference-line points near row {2}): the track direction is undefined there")]
    Degenerate(usize, usize, isize),
}

impl ZoneError {
    /// What kind of failure this is ([`rulka_error::ErrorKind`]): callers
    /// match on it, and binaries take their exit code from it.
    pub fn kind(&self) -> rulka_error::ErrorKind {
        rulka_error::ErrorKind::BadInput
    }
}

/// A map's zone centres and what the original precomputes from them.
#[derive(Debug, Clone)]
pub struct ZoneMap {
    centers: Vec<[f64; 3]>,
    transitions: Vec<[f64; 3]>,
    seg_len: Vec<f64>,
    cum: Vec<f64>,
    axis: Vec<[f64; 3]>,
    gate: Option<(Vec<[f64; 3]>, Vec<f64>)>,
    p: ZoneParams,
    start_distance: f64,
}

fn sub(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

fn norm(a: [f64; 3]) -> f64 {
    dot(a, a).sqrt()
}

impl ZoneMap {
    /// The zone map of a reference line (`N ≥ 2` points, 0.5 m apart).
    pub fn new(reference_line: &[[f64; 3]], p: ZoneParams) -> Result<Self, ZoneError> {
        let n = reference_line.len();
        if n < 2 {
            return Err(ZoneError::TooShort(n));
        }
        let (first, last) = (reference_line[0], reference_line[n - 1]);
        let back = sub(first, reference_line[1]);
        let ahead = sub(last, reference_line[n - 2]);
        let mut c = Vec::with_capacity(p.n_before + n + p.n_after);
        for k in (1..=p.n_before).rev() {
            let k = k as f64;
            c.push([first[0] + back[0] * k, first[1] + back[1] * k, first[2] + back[2] * k]);
        }
        c.extend_from_slice(reference_line);
        for k in 1..=p.n_after {
            let k = k as f64;
            c.push([last[0] + ahead[0] * k, last[1] + ahead[1] * k, last[2] + ahead[2] * k]);
        }
        if c.len() > 10 {
            let raw = c.clone();
            for i in 5..c.len() - 5 {
                for d in 0..3 {
                    c[i][d] = 0.5 * (raw[i - 5][d] + raw[i + 5][d]);
                }
            }
        }
        let transitions: Vec<[f64; 3]> = c
            .windows(2)
            .map(|w| {
                [0.5 * (w[0][0] + w[1][0]), 0.5 * (w[0][1] + w[1][1]), 0.5 * (w[0][2] + w[1][2])]
            })
            .collect();
        let deltas: Vec<[f64; 3]> = transitions.windows(2).map(|w| sub(w[1], w[0])).collect();
        let seg_len: Vec<f64> = deltas.iter().map(|&d| norm(d)).collect();
        if let Some(k) = seg_len.iter().position(|&l| l <= 0.0 || !l.is_finite()) {
            return Err(ZoneError::Degenerate(k, k + 1, k as isize + 1 - p.n_before as isize));
        }
        let mut cum = Vec::with_capacity(seg_len.len() + 1);
        cum.push(0.0);
        for l in &seg_len {
            cum.push(cum[cum.len() - 1] + l);
        }
        let axis =
            deltas.iter().zip(&seg_len).map(|(d, l)| [d[0] / l, d[1] / l, d[2] / l]).collect();
        let mut map = Self {
            centers: c,
            transitions,
            seg_len,
            cum,
            axis,
            gate: None,
            p,
            start_distance: 0.0,
        };
        let start = map.start_index();
        map.start_distance = map.distance(start, map.centers[start]);
        Ok(map)
    }

    /// Gates zone advances by the map's real checkpoints, as the original's
    /// `sync_virtual_and_real_checkpoints`: each checkpoint is matched to the
    /// zone centres within 12 m of it (one per pass, ±200 points apart for
    /// multi-lap maps), and the car may only enter the zone after such a
    /// centre while within 12 m of the checkpoint.
    pub fn with_checkpoints(mut self, checkpoints: &[[f64; 3]]) -> Self {
        let n = self.centers.len();
        let mut next = vec![[0.0; 3]; n];
        let mut max = vec![9_999_999.0; n];
        for &cp in checkpoints {
            let mut d: Vec<f64> = self.centers.iter().map(|&c| norm(sub(c, cp))).collect();
            while let Some((idx, &m)) = d.iter().enumerate().min_by(|a, b| a.1.total_cmp(b.1)) {
                if m >= 12.0 {
                    break;
                }
                next[idx] = cp;
                max[idx] = 12.0;
                for x in &mut d[idx.saturating_sub(200)..(idx + 200).min(n)] {
                    *x = 99_999.0;
                }
            }
        }
        self.gate = Some((next, max));
        self
    }

    /// The settings it was built with.
    pub fn params(&self) -> &ZoneParams {
        &self.p
    }

    /// All zone centres (extrapolated and smoothed).
    pub fn centers(&self) -> &[[f64; 3]] {
        &self.centers
    }

    /// The zone index at the start line (`n_before`).
    pub fn start_index(&self) -> usize {
        self.p.n_before
    }

    /// The last zone index a car can reach (the finish's).
    pub fn last_index(&self) -> usize {
        self.centers.len() - 1 - self.p.n_after
    }

    /// `distance_since_track_begin` at the start line.
    pub fn start_distance(&self) -> f64 {
        self.start_distance
    }

    /// The original's `update_current_zone_idx`: forward while the next
    /// centre is no farther than the current one and within reach (and the
    /// real-checkpoint gate allows), then back while the previous one is
    /// strictly closer and within reach. Positions at or below the deck
    /// height leave the index as it is.
    pub fn update(&self, zone: usize, pos: [f64; 3]) -> usize {
        // NaN positions compare false: no tracking, as the original's `>`.
        if pos[1].partial_cmp(&self.p.deck_height) != Some(std::cmp::Ordering::Greater) {
            return zone;
        }
        let c = &self.centers;
        let reach = self.p.max_dist_to_vcp;
        let mut idx = zone.clamp(1, self.last_index());
        let dist = |i: usize| norm(sub(c[i], pos));
        let gate_ok = |i: usize| match &self.gate {
            Some((next, max)) => norm(sub(next[i], pos)) < max[i],
            None => true,
        };
        let (mut d1, mut d2, mut d3) = (dist(idx + 1), dist(idx), dist(idx - 1));
        while d1 <= d2 && d1 <= reach && idx < self.last_index() && gate_ok(idx) {
            idx += 1;
            d3 = d2;
            d2 = d1;
            d1 = dist(idx + 1);
        }
        while idx >= 2 && d3 < d2 && d3 <= reach {
            idx -= 1;
            d2 = d3;
            d3 = dist(idx - 1);
        }
        idx
    }

    /// The original's `distance_since_track_begin` in zone `zone`: the
    /// transitions' running length up to the zone's entry plus the clamped
    /// projection of `pos` on the zone's segment.
    pub fn distance(&self, zone: usize, pos: [f64; 3]) -> f64 {
        let k = zone.clamp(1, self.last_index()) - 1;
        let along = dot(sub(pos, self.transitions[k]), self.axis[k]).clamp(0.0, self.seg_len[k]);
        self.cum[k] + along
    }

    /// The margin-to-finish input: `min(margin_cap, distance to the finish's
    /// transition − distance)` (not clamped below, as the original).
    pub fn margin(&self, distance: f64) -> f64 {
        self.p.margin_cap.min(self.cum[self.centers.len() - self.p.n_after] - distance)
    }

    /// The zone centres the float vector shows from zone `zone`: every
    /// `every`-th one, `n_inputs` of them.
    pub fn ahead(&self, zone: usize) -> impl Iterator<Item = [f64; 3]> + '_ {
        let last = self.centers.len() - 1;
        (0..self.p.n_inputs).map(move |i| self.centers[(zone + i * self.p.every).min(last)])
    }

    /// The nearest zone to `pos` along the whole map, refined with
    /// [`ZoneMap::update`]: the index a collector's tracker would hold for a
    /// car there (for inspecting a single state without its history).
    pub fn locate(&self, pos: [f64; 3]) -> usize {
        let nearest = (1..=self.last_index())
            .min_by(|&a, &b| {
                norm(sub(self.centers[a], pos)).total_cmp(&norm(sub(self.centers[b], pos)))
            })
            .unwrap_or(self.start_index());
        self.update(nearest, pos)
    }
}
