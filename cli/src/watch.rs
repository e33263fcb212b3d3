//! Pictures of a policy driving: `rulka sim render --model` (its line over
//! the track beside the autopilot's, coloured by speed, as SVG) and
//! `rulka sim replay` (one run as an animated GIF: a top-down view with the
//! car and its trail, and the network's own ego view).

use std::path::Path;

use anyhow::Context as _;
use rulka_config::Config;
use rulka_env::{cell, SimEnv, Track};
use rulka_inference::{EngineOptions, InferenceError, ModelSource, PolicyEngine};
use rulka_inference::{Episode, Job, Trace};
use rulka_report::{viridis, Item, Note, TopView, View, Width};

use crate::BadInput;

/// An engine on `model` for `cfg`, greedy or sampling; a model made for
/// another network (its `rulka.network_hash`, its inputs and outputs) is a
/// [`BadInput`] naming both.
pub fn open_engine(
    cfg: &Config,
    model: &Path,
    greedy: bool,
    ort: Option<&Path>,
) -> anyhow::Result<PolicyEngine> {
    let bytes =
        std::fs::read(model).map_err(|e| BadInput(format!("--model {}: {e}", model.display())))?;
    let label = model.display().to_string();
    let bad = |e: InferenceError| -> anyhow::Error {
        match e {
            InferenceError::ModelMismatch { .. } | InferenceError::Session { .. } => {
                BadInput(e.to_string()).into()
            }
            other => other.into(),
        }
    };
    rulka_inference::check_network(cfg, &bytes, &label).map_err(bad)?;
    let rt = rulka_inference::load_runtime(ort)?;
    PolicyEngine::new(
        rt,
        cfg,
        ModelSource::File(model.to_path_buf()),
        0,
        EngineOptions { greedy, seed: 0 },
    )
    .map_err(bad)
}

fn outcome(e: &Episode) -> String {
    match e.race_time_s {
        Some(t) => format!("{t:.2} s"),
        None => format!("not finished ({:.0}%)", 100.0 * e.progress),
    }
}

/// `rulka sim render --model`: the policy's and the autopilot's lines on
/// track `seed` as two SVG panels, coloured by speed on one scale.
pub fn render_policy(
    cfg: &Config,
    model: &Path,
    seed: u64,
    out: &Path,
    ort: Option<&Path>,
) -> anyhow::Result<()> {
    let mut engine = open_engine(cfg, model, true, ort)?;
    let mut env = SimEnv::new(cfg);
    let mut policy = Trace::default();
    let ep = rulka_inference::run_episode(
        &mut env,
        &mut engine,
        Job { seed, episode: 0 },
        Some(&mut policy),
    )?;
    let mut pilot = Trace::default();
    let pe = rulka_inference::run_autopilot_traced(cfg, seed, Some(&mut pilot))?;
    let track = env.track().context("no track")?.clone();
    let name = model.file_name().map_or("policy".into(), |n| n.to_string_lossy().into_owned());
    let svg = lines_svg(
        &track,
        &[
            (format!("{name}: {}", outcome(&ep)), &policy),
            (format!("autopilot: {}", outcome(&pe)), &pilot),
        ],
    )?;
    std::fs::write(out, svg).with_context(|| format!("writing {}", out.display()))?;
    println!(
        "{} ({:.0} m): {name} {}, autopilot {}\nwrote {}",
        track_label(cfg, seed),
        track.length(),
        outcome(&ep),
        outcome(&pe),
        out.display()
    );
    Ok(())
}

/// Panels side by side, one per driven line, on the same track and speed scale.
pub fn lines_svg(track: &Track, lines: &[(String, &Trace)]) -> anyhow::Result<String> {
    let vmax = lines.iter().flat_map(|(_, t)| t.speeds.iter().copied()).fold(1.0_f64, f64::max);
    let centre: Vec<[f64; 2]> = track.points.iter().step_by(4).copied().collect();
    let road = |colour: [u8; 3], width: f64| Item::Path {
        points: centre.clone(),
        colour,
        width: Width::Metres(width),
    };
    let mut fig = TopView::new("").pad(track.width / 2.0 + 6.0);
    for (label, trace) in lines {
        let mut view = View::new(label.clone())
            .background([0x6d, 0x7a, 0x62])
            .item(road([0xe8, 0xe8, 0xe8], track.width + 1.0))
            .item(road([0x9a, 0x9a, 0x9a], track.width));
        for (i, colour) in [(0, [0xff, 0xff, 0xff]), (track.finish_index, [0x11, 0x11, 0x11])] {
            let (p, t) = (track.points[i], track.tangents[i]);
            let n = [-t[1] * track.width / 2.0, t[0] * track.width / 2.0];
            let points = vec![[p[0] + n[0], p[1] + n[1]], [p[0] - n[0], p[1] - n[1]]];
            view = view.item(Item::Path { points, colour, width: Width::Px(3) });
        }
        let colours = trace.speeds.iter().skip(1).map(|v| viridis(v / vmax)).collect();
        let points = trace.points.clone();
        fig = fig.view(view.item(Item::Coloured { points, colours, width_px: 3 }));
    }
    let ramp = Note::Ramp {
        lo: "speed 0".into(),
        hi: format!("{vmax:.0} m/s ({:.0} km/h)", vmax * 3.6),
        caption: "white line: start, black: finish".into(),
    };
    Ok(fig.note(ramp).svg()?)
}

/// Palette of the replay GIF: 64 greys, 64 speed colours, then fixed colours.
mod pal {
    pub const GREY: u8 = 0;
    pub const SPEED: u8 = 64;
    pub const CAR: u8 = 128;
    pub const OUTSIDE: u8 = 129;
    pub const ROAD: u8 = 130;
    pub const EDGE: u8 = 131;
    pub const LINE_DARK: u8 = 132;
    pub const LINE_LIGHT: u8 = 133;
    pub const BACKGROUND: u8 = 134;
}

fn palette() -> Vec<u8> {
    let mut p = Vec::with_capacity(3 * 135);
    for i in 0..64u32 {
        let g = (i * 255 / 63) as u8;
        p.extend([g, g, g]);
    }
    for i in 0..64 {
        p.extend(viridis(f64::from(i) / 63.0));
    }
    p.extend([230, 30, 30]); // car
    p.extend([109, 122, 98]); // outside
    p.extend([154, 154, 154]); // road
    p.extend([232, 232, 232]); // edge
    p.extend([17, 17, 17]); // line dark
    p.extend([250, 250, 250]); // line light
    p.extend([255, 255, 255]); // background
    p
}

/// `rulka sim replay`: one greedy run of `model` on track `seed` as a GIF —
/// left the whole track from above with the car and its trail (coloured by
/// speed), right the network's ego frame; a frame every `every` decisions,
/// played in real time.
pub fn replay(
    cfg: &Config,
    model: &Path,
    seed: u64,
    out: &Path,
    every: u32,
    size: u32,
    ort: Option<&Path>,
) -> anyhow::Result<()> {
    if every == 0 {
        return Err(BadInput("--every 0: at least one decision per frame".into()).into());
    }
    if !(64..=2048).contains(&size) {
        return Err(BadInput(format!("--size {size}: between 64 and 2048 pixels")).into());
    }
    let mut engine = open_engine(cfg, model, true, ort)?;
    let mut env = SimEnv::new(cfg);
    let (iw, ih) = (cfg.nn.image_width as usize, cfg.nn.image_height as usize);
    // Positions, speeds and ego frames per decision.
    let mut steps: Vec<([f64; 2], f64, Vec<u8>)> = Vec::new();
    let ep = {
        engine.reseed(rulka_inference::episode_seed(Job { seed, episode: 0 }));
        rulka_inference::drive_episode(
            &mut env,
            Job { seed, episode: 0 },
            true,
            |frame, floats| engine.act(frame, floats).map(|a| a.actions().to_vec()),
            |e, frame| steps.push((e.car().pos, e.car().speed(), frame.to_vec())),
        )?
    };
    let track = env.track().context("no track")?.clone();
    let (lo, hi) = track.bounds();
    let span = (hi[0] - lo[0]).max(hi[1] - lo[1]) + 8.0;
    let mpp = span / f64::from(size);
    let (tw, th) = (
        ((hi[0] - lo[0] + 8.0) / mpp).ceil() as usize,
        ((hi[1] - lo[1] + 8.0) / mpp).ceil() as usize,
    );
    let zoom = (size as usize / 2 / ih.max(1)).clamp(1, 8);
    let (ew, eh) = (iw * zoom, ih * zoom);
    let (w, h) = (tw + 8 + ew, th.max(eh));
    let mut base = vec![pal::BACKGROUND; w * h];
    for row in 0..th {
        let y = hi[1] + 4.0 - (row as f64 + 0.5) * mpp;
        for col in 0..tw {
            let x = lo[0] - 4.0 + (col as f64 + 0.5) * mpp;
            base[row * w + col] = match track.cell_at(x, y) {
                cell::ROAD => pal::ROAD,
                cell::EDGE => pal::EDGE,
                cell::LINE_DARK => pal::LINE_DARK,
                cell::LINE_LIGHT => pal::LINE_LIGHT,
                _ => pal::OUTSIDE,
            };
        }
    }
    let to_px = |p: [f64; 2]| {
        (((p[0] - lo[0] + 4.0) / mpp) as isize, ((hi[1] + 4.0 - p[1]) / mpp) as isize)
    };
    let vmax = steps.iter().map(|s| s.1).fold(1.0_f64, f64::max);
    let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut enc = gif::Encoder::new(std::io::BufWriter::new(file), w as u16, h as u16, &palette())
        .context("starting the GIF")?;
    enc.set_repeat(gif::Repeat::Infinite).context("writing the GIF")?;
    let delay = ((f64::from(every) * f64::from(cfg.ms_per_action()) / 10.0).round() as u16).max(2);
    let mut canvas = base.clone();
    let mut prev: Option<Vec<u8>> = None;
    let mut frames = 0usize;
    let mut trail_to = 0usize;
    let put = |buf: &mut [u8], x: isize, y: isize, c: u8| {
        if x >= 0 && y >= 0 && (x as usize) < tw && (y as usize) < th {
            buf[y as usize * w + x as usize] = c;
        }
    };
    for (k, (pos, _, frame)) in steps.iter().enumerate() {
        let last = k + 1 == steps.len();
        if k % every as usize != 0 && !last {
            continue;
        }
        // The trail so far stays on the canvas; the car is drawn on a copy.
        while trail_to <= k {
            let (x, y) = to_px(steps[trail_to].0);
            let c = pal::SPEED + (steps[trail_to].1 / vmax * 63.0).round().clamp(0.0, 63.0) as u8;
            for (dx, dy) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                put(&mut canvas, x + dx, y + dy, c);
            }
            trail_to += 1;
        }
        let mut img = canvas.clone();
        let (cx, cy) = to_px(*pos);
        for dy in -2..=2 {
            for dx in -2..=2 {
                put(&mut img, cx + dx, cy + dy, pal::CAR);
            }
        }
        for y in 0..eh {
            for x in 0..ew {
                let g = frame.get((y / zoom) * iw + x / zoom).copied().unwrap_or(0);
                img[y * w + tw + 8 + x] = pal::GREY + g / 4;
            }
        }
        // Only the rectangle that changed since the previous frame is stored.
        let (x0, y0, x1, y1) = match &prev {
            None => (0, 0, w, h),
            Some(p) => changed_box(p, &img, w, h).unwrap_or((0, 0, 1, 1)),
        };
        let mut buf = Vec::with_capacity((x1 - x0) * (y1 - y0));
        for y in y0..y1 {
            buf.extend_from_slice(&img[y * w + x0..y * w + x1]);
        }
        let gf = gif::Frame {
            left: x0 as u16,
            top: y0 as u16,
            width: (x1 - x0) as u16,
            height: (y1 - y0) as u16,
            buffer: std::borrow::Cow::Owned(buf),
            delay: if last { 300 } else { delay },
            dispose: gif::DisposalMethod::Keep,
            ..gif::Frame::default()
        };
        enc.write_frame(&gf).context("writing a GIF frame")?;
        prev = Some(img);
        frames += 1;
    }
    drop(enc);
    let bytes = std::fs::metadata(out).map_or(0, |m| m.len());
    println!(
        "{}: {} in {} decisions; wrote {} ({frames} frames, {w}×{h}, {:.0} kB)",
        track_label(cfg, seed),
        outcome(&ep),
        ep.steps,
        out.display(),
        bytes as f64 / 1024.0
    );
    Ok(())
}

/// The smallest `(x0, y0, x1, y1)` (ends excluded) holding every pixel that
/// differs between `a` and `b`; None when equal.
fn changed_box(a: &[u8], b: &[u8], w: usize, h: usize) -> Option<(usize, usize, usize, usize)> {
    let (mut x0, mut y0, mut x1, mut y1) = (w, h, 0, 0);
    for y in 0..h {
        for x in 0..w {
            if a[y * w + x] != b[y * w + x] {
                x0 = x0.min(x);
                y0 = y0.min(y);
                x1 = x1.max(x + 1);
                y1 = y1.max(y + 1);
            }
        }
    }
    (x1 > x0).then_some((x0, y0, x1, y1))
}

/// "track 3 (Medium)", or the map file whose shape the simulator drives.
pub(crate) fn track_label(cfg: &Config, seed: u64) -> String {
    match &cfg.environment.sim.track_from {
        Some(p) => p.display().to_string(),
        None => format!("track {seed} ({:?})", cfg.environment.sim.track),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_box_bounds_exactly_the_differences() {
        let a = vec![0u8; 5 * 4];
        let mut b = a.clone();
        assert_eq!(changed_box(&a, &b, 5, 4), None);
        b[5 + 1] = 1; // (1, 1)
        b[3 * 5 + 3] = 1; // (3, 3)
        assert_eq!(changed_box(&a, &b, 5, 4), Some((1, 1, 4, 4)));
    }
}
