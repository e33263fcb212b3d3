#![allow(clippy::unwrap_used)]
//! The game's `SimStateData` decoder against independent references: a
//! buffer whose every word holds its own offset (the offsets of the layout
//! table), the public `tminterface` package on random buffers, and
//! hand-checked bad input; the finish patch; the float vector built from
//! game states against hand-computed cases (rotations of known angles, known
//! zone geometry, gearbox counter, contact materials).

use std::path::Path;
use std::process::Command;

use rulka_config::Config;
use rulka_env::{
    patch_finish, CpTime, EnvError, FloatBuilder, GameState, GameStateError, ProgressTracker,
    Wheel, ZoneMap, ZoneParams, GAME_STATE_LEN,
};
use rulka_test_support::venv_python;

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// A buffer of `8356 + 4ns + 8nt` bytes whose every 4-byte word holds its own
/// byte offset, except the two counts.
fn offsets_buffer(ns: usize, nt: usize) -> Vec<u8> {
    let len = GAME_STATE_LEN + 4 * ns + 8 * nt;
    let mut b: Vec<u8> = (0..len / 4).flat_map(|w| ((w * 4) as u32).to_le_bytes()).collect();
    b[8348..8352].copy_from_slice(&(ns as i32).to_le_bytes());
    let nt_at = 8352 + 4 * ns;
    b[nt_at..nt_at + 4].copy_from_slice(&(nt as i32).to_le_bytes());
    b
}

#[test]
fn every_field_is_read_at_the_offset_of_the_layout_table() {
    let (ns, nt) = (2, 3);
    let st = GameState::decode(&offsets_buffer(ns, nt)).unwrap();
    let f = |x: f32| x.to_bits();
    assert_eq!((st.version, st.context_mode, st.flags), (0, 4, 8));
    for i in 0..3 {
        for j in 0..3 {
            assert_eq!(f(st.rotation[i][j]), 688 + 4 * (3 * i + j) as u32, "rotation[{i}][{j}]");
        }
    }
    for k in 0..3 {
        assert_eq!(f(st.position[k]), 724 + 4 * k as u32);
        assert_eq!(f(st.linear_speed[k]), 736 + 4 * k as u32);
        assert_eq!(f(st.angular_speed[k]), 760 + 4 * k as u32);
    }
    assert_eq!(st.gearbox_state, 2388);
    assert_eq!(f(st.actual_rpm), 3112);
    assert_eq!(st.gear, 3128);
    assert!(st.is_freewheeling, "word 3196 is non-zero");
    for (i, w) in st.wheels.iter().enumerate() {
        let base = 3816 + 764 * i as u32;
        assert_eq!(f(w.damper_absorb), base + 180, "wheel {i}");
        assert!(w.has_ground_contact && w.is_sliding, "wheel {i}: non-zero words");
        assert_eq!(w.contact_material_id, (base + 296) as i32, "wheel {i}");
        assert_eq!(u32::from(w.material()), (base + 296) & 0xFFFF);
    }
    assert_eq!(st.player_race_time, 7892);
    assert_eq!(st.race_time(), 0, "flags 8 lacks the player-info bit 0x80");
    assert_eq!(st.cp_states, vec![true; ns]);
    let t0 = 8352 + 4 * ns + 4;
    let want: Vec<CpTime> = (0..nt)
        .map(|k| CpTime { time: (t0 + 8 * k) as i32, stunts_score: (t0 + 8 * k + 4) as i32 })
        .collect();
    assert_eq!(st.cp_times, want);
    // With the flag, the race time is the player-info word.
    let mut b = offsets_buffer(0, 0);
    b[8..12].copy_from_slice(&0x80u32.to_le_bytes());
    assert_eq!(GameState::decode(&b).unwrap().race_time(), 7892);
}

#[test]
fn encode_writes_what_decode_reads() {
    let mut rng = 7u64;
    for _ in 0..50 {
        let mut r = || xorshift(&mut rng);
        let mut fl = || f32::from_bits((r() >> 32) as u32 & 0x7F7F_FFFF);
        let st = GameState {
            version: 3,
            context_mode: 1,
            flags: 0xFF,
            rotation: [[fl(), fl(), fl()], [fl(), fl(), fl()], [fl(), fl(), fl()]],
            position: [fl(), fl(), fl()],
            linear_speed: [fl(), fl(), fl()],
            angular_speed: [fl(), fl(), fl()],
            gearbox_state: 2,
            actual_rpm: fl(),
            gear: 4,
            is_freewheeling: true,
            wheels: [Wheel {
                damper_absorb: fl(),
                has_ground_contact: true,
                contact_material_id: 0x0003_0010,
                is_sliding: false,
            }; 4],
            player_race_time: -30,
            cp_states: vec![true, false],
            cp_times: vec![
                CpTime { time: 5, stunts_score: 6 },
                CpTime { time: -1, stunts_score: 0 },
            ],
        };
        assert_eq!(GameState::decode(&st.encode()).unwrap(), st);
    }
}

/// Random buffers decoded by rulka and by the public `tminterface` 1.0.2
/// package: every field bit for bit.
#[test]
fn tminterface_agrees_on_random_buffers() {
    let Some(python) = venv_python("the tminterface cross-check") else { return };
    let mut rng = 0x5EEDu64;
    let mut file = Vec::new();
    let mut ours = Vec::new();
    for i in 0..1200 {
        let ns = (xorshift(&mut rng) % 41) as usize;
        let nt = (xorshift(&mut rng) % 41) as usize;
        let len = GAME_STATE_LEN + 4 * ns + 8 * nt;
        let mut b: Vec<u8> = (0..len).map(|_| xorshift(&mut rng) as u8).collect();
        b[8348..8352].copy_from_slice(&(ns as i32).to_le_bytes());
        b[8352 + 4 * ns..8356 + 4 * ns].copy_from_slice(&(nt as i32).to_le_bytes());
        if i % 2 == 0 {
            b[8] |= 0x80; // half with the race-time flag
        }
        ours.push(GameState::decode(&b).unwrap());
        file.extend_from_slice(&(len as u32).to_le_bytes());
        file.extend_from_slice(&b);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("states.bin");
    std::fs::write(&path, &file).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/decode_sim_states.py");
    let out = Command::new(python).arg(script).arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(lines.len(), ours.len());
    // Floats: the reference gives the bits of the f32 widened to f64.
    let same = |ref_bits: u64, x: f32| {
        let r = f64::from_bits(ref_bits);
        (r.is_nan() && x.is_nan()) || r.to_bits() == f64::from(x).to_bits()
    };
    for (k, (line, st)) in lines.iter().zip(&ours).enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let u = |key: &str| v[key].as_u64().unwrap();
        let i = |key: &str| v[key].as_i64().unwrap();
        assert_eq!(u("version"), u64::from(st.version), "buffer {k}");
        assert_eq!(u("context_mode"), u64::from(st.context_mode), "buffer {k}");
        assert_eq!(u("flags"), u64::from(st.flags), "buffer {k}");
        for a in 0..3 {
            for b in 0..3 {
                assert!(
                    same(v["rotation"][a][b].as_u64().unwrap(), st.rotation[a][b]),
                    "buffer {k} rotation"
                );
            }
            assert!(
                same(v["position"][a].as_u64().unwrap(), st.position[a]),
                "buffer {k} position"
            );
            assert!(same(v["linear_speed"][a].as_u64().unwrap(), st.linear_speed[a]), "buffer {k}");
            assert!(
                same(v["angular_speed"][a].as_u64().unwrap(), st.angular_speed[a]),
                "buffer {k}"
            );
        }
        assert_eq!(i("gearbox_state"), i64::from(st.gearbox_state), "buffer {k}");
        assert!(same(u("actual_rpm"), st.actual_rpm), "buffer {k} rpm");
        assert_eq!(i("gear"), i64::from(st.gear), "buffer {k}");
        assert_eq!(v["is_freewheeling"].as_bool().unwrap(), st.is_freewheeling, "buffer {k}");
        for (w, ours) in st.wheels.iter().enumerate() {
            let r = &v["wheels"][w];
            assert!(
                same(r["damper_absorb"].as_u64().unwrap(), ours.damper_absorb),
                "buffer {k} wheel {w}"
            );
            assert_eq!(r["has_ground_contact"].as_bool().unwrap(), ours.has_ground_contact);
            assert_eq!(
                r["contact_material_id"].as_i64().unwrap(),
                i64::from(ours.contact_material_id)
            );
            assert_eq!(r["is_sliding"].as_bool().unwrap(), ours.is_sliding, "buffer {k} wheel {w}");
        }
        assert_eq!(i("race_time"), i64::from(st.race_time()), "buffer {k}");
        let states: Vec<bool> =
            v["cp_states"].as_array().unwrap().iter().map(|x| x.as_bool().unwrap()).collect();
        assert_eq!(states, st.cp_states, "buffer {k}");
        let times: Vec<CpTime> = v["cp_times"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| CpTime {
                time: t[0].as_i64().unwrap() as i32,
                stunts_score: t[1].as_i64().unwrap() as i32,
            })
            .collect();
        assert_eq!(times, st.cp_times, "buffer {k}");
    }
}

#[test]
fn bad_buffers_are_named_errors() {
    assert_eq!(
        GameState::decode(&[0u8; 100]).unwrap_err(),
        GameStateError::TooShort { len: 100, min: GAME_STATE_LEN }
    );
    let mut b = offsets_buffer(0, 0);
    b[8348..8352].copy_from_slice(&(-3i32).to_le_bytes());
    let e = GameState::decode(&b).unwrap_err();
    assert_eq!(e, GameStateError::Count { field: "cp_states", count: -3, max: 2000 });
    assert!(e.to_string().contains("cp_states count -3"), "{e}");
    let mut b = offsets_buffer(0, 0);
    b[8352..8356].copy_from_slice(&5000i32.to_le_bytes());
    assert!(matches!(
        GameState::decode(&b),
        Err(GameStateError::Count { field: "cp_times", count: 5000, .. })
    ));
    // A fixed part claiming 10 states but carrying none of them.
    let mut b = offsets_buffer(0, 0);
    b[8348..8352].copy_from_slice(&10i32.to_le_bytes());
    assert!(matches!(GameState::decode(&b), Err(GameStateError::Length { .. })));
    // Oversized: trailing bytes after the declared arrays.
    let mut b = offsets_buffer(1, 1);
    b.extend_from_slice(&[0; 8]);
    let e = GameState::decode(&b).unwrap_err();
    assert_eq!(
        e,
        GameStateError::Length {
            len: GAME_STATE_LEN + 4 + 8 + 8,
            expected: GAME_STATE_LEN + 12,
            ns: 1,
            nt: 1
        }
    );
    assert!(e.to_string().contains("must be 8368"), "{e}");
}

#[test]
fn the_finish_patch_sets_the_last_checkpoint_time_to_minus_one() {
    let st = GameState {
        cp_states: vec![true, true],
        cp_times: vec![
            CpTime { time: 9000, stunts_score: 1 },
            CpTime { time: 24150, stunts_score: 2 },
        ],
        ..Default::default()
    };
    let mut b = st.encode();
    assert!(patch_finish(&mut b).unwrap());
    let back = GameState::decode(&b).unwrap();
    assert_eq!(
        back.cp_times,
        vec![CpTime { time: 9000, stunts_score: 1 }, CpTime { time: -1, stunts_score: 2 }]
    );
    assert_eq!(
        GameState { cp_times: st.cp_times.clone(), ..back.clone() },
        st,
        "nothing else changed"
    );
    let mut empty = GameState::default().encode();
    let before = empty.clone();
    assert!(!patch_finish(&mut empty).unwrap(), "no cp_times: prevent_simulation_finish instead");
    assert_eq!(empty, before);
}

// --- the float vector from game states, by hand -----------------------------------

/// 2 zone centres every 20 points, 2 previous actions, 4 material groups.
fn cfg() -> Config {
    Config::from_yaml_str(
        "environment: {n_zone_centers_in_inputs: 2, n_prev_actions_in_inputs: 2, n_zone_centers_extrapolate_after_end_of_map: 40}",
        "t",
    )
    .unwrap()
}

/// A straight reference line along +z from the origin, 0.5 m apart, `len` m long.
fn straight(len: f64) -> Vec<[f64; 3]> {
    (0..=(len / 0.5) as usize).map(|i| [0.0, 0.0, 0.5 * i as f64]).collect()
}

/// A level car at `pos` heading `yaw` radians from +z toward +x (its right
/// axis is then `(cos yaw, 0, −sin yaw)`: a proper rotation with columns
/// right, up, forward).
fn car(pos: [f32; 3], yaw: f32, vel: [f32; 3]) -> GameState {
    let (s, c) = yaw.sin_cos();
    GameState {
        flags: 0xFF,
        rotation: [[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]],
        position: pos,
        linear_speed: vel,
        wheels: [Wheel {
            damper_absorb: 0.01,
            has_ground_contact: true,
            contact_material_id: 16,
            is_sliding: false,
        }; 4],
        cp_states: vec![false],
        cp_times: vec![CpTime { time: -1, stunts_score: 0 }],
        ..Default::default()
    }
}

fn build(c: &Config, st: &GameState, map: &ZoneMap, tr: &mut ProgressTracker) -> Vec<f32> {
    let b = FloatBuilder::new(c);
    let mut out = vec![0f32; b.float_dim()];
    b.build(st, map, tr, &mut out).unwrap();
    out
}

#[test]
fn a_straight_map_by_hand() {
    let c = cfg();
    let map = ZoneMap::new(&straight(100.0), ZoneParams::from_config(&c)).unwrap();
    let mut tr = ProgressTracker::new(&map, 2);
    // Layout: temporal 1, prev 8, gear/wheels 32, ang 3, vel 3, y_map 3, zones 6, margin, freewheel = 58.
    let x = build(&c, &car([0.0, 0.0, 12.3], 0.0, [0.0, 0.0, 30.0]), &map, &mut tr);
    assert_eq!(x.len(), 58);
    // The nearest zone centre: 12.5 m is point 25 → index 20 + 25 (12.3 m is nearer 12.5 than 12.0).
    assert_eq!(tr.zone, 45);
    assert_eq!(
        &x[1..9],
        &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0],
        "no history: the forward action"
    );
    assert_eq!(&x[9..13], &[0.0; 4], "not sliding");
    assert_eq!(&x[13..17], &[1.0; 4], "ground contact");
    assert_eq!(&x[21..25], &[0.0, 0.0, 0.0, 0.0], "gearbox 0, gear 0, rpm 0, counter 0");
    assert_eq!(&x[25..29], &[1.0, 0.0, 0.0, 0.0], "asphalt (16) is group 0");
    assert_eq!(&x[44..47], &[0.0, 0.0, 30.0], "velocity [right, up, forward]");
    assert_eq!(&x[47..50], &[0.0, 1.0, 0.0], "y_map");
    // Zone centres 0.2 m and 10.2 m ahead.
    assert!((x[50] - 0.0).abs() < 1e-6 && (x[52] - 0.2).abs() < 1e-5, "{:?}", &x[50..56]);
    rulka_test_support::margin::close("x[55] vs 10.2", f64::from(x[55]), 10.2, 1e-5);
    // Margin: the transition half a point past the finish lies 110.5 m from the
    // first transition (at z = −9.75); the car is 12.3 + 9.75 m from it.
    rulka_test_support::margin::close(
        "x[56] vs (110.5 - 22.05)",
        f64::from(x[56]),
        110.5 - 22.05,
        1e-4,
    );
    assert_eq!(x[57], 0.0, "not freewheeling");
}

#[test]
fn rotated_cars_see_the_world_in_their_frame() {
    let c = cfg();
    let map = ZoneMap::new(&straight(100.0), ZoneParams::from_config(&c)).unwrap();
    // Heading 90° toward +x while the road runs along +z: the road is to the car's left.
    let yaw = std::f32::consts::FRAC_PI_2;
    let mut tr = ProgressTracker::new(&map, 2);
    tr.zone = map.locate([0.0, 0.0, 50.0]);
    assert_eq!(tr.zone, 120);
    let x = build(&c, &car([0.0, 0.0, 50.0], yaw, [10.0, 0.0, 0.0]), &map, &mut tr);
    assert!(
        (x[44] - 0.0).abs() < 1e-5 && (x[46] - 10.0).abs() < 1e-5,
        "moving forward: {:?}",
        &x[44..47]
    );
    // Zone 1, 10 m along +z: right axis (cos 90°, 0, −sin 90°) = −z → lateral −10, forward 0.
    assert!((x[53] + 10.0).abs() < 1e-4 && x[55].abs() < 1e-4, "{:?}", &x[53..56]);
    // A car pitched nose-up by 30° about its right axis (forward axis (0, sin, cos)):
    // world up seen as [0, cos 30°, sin 30°] — the up axis's and the forward axis's y.
    let (s, co) = 30f32.to_radians().sin_cos();
    let mut pitched = car([0.0, 0.0, 50.0], 0.0, [0.0; 3]);
    pitched.rotation = [[1.0, 0.0, 0.0], [0.0, co, s], [0.0, -s, co]];
    let mut tr = ProgressTracker::new(&map, 2);
    let x = build(&c, &pitched, &map, &mut tr);
    assert!(
        (x[47]).abs() < 1e-6 && (x[48] - co).abs() < 1e-6 && (x[49] - s).abs() < 1e-6,
        "{:?}",
        &x[47..50]
    );
    // Angular speed about the world up axis, seen by the yawed car: still about its up axis.
    let mut spin = car([0.0, 0.0, 50.0], 0.7, [0.0; 3]);
    spin.angular_speed = [0.0, 1.5, 0.0];
    let mut tr = ProgressTracker::new(&map, 2);
    let x = build(&c, &spin, &map, &mut tr);
    assert!(x[41].abs() < 1e-6 && (x[42] - 1.5).abs() < 1e-6 && x[43].abs() < 1e-6);
}

#[test]
fn gearbox_counter_history_and_materials() {
    let c = cfg();
    let map = ZoneMap::new(&straight(100.0), ZoneParams::from_config(&c)).unwrap();
    let mut tr = ProgressTracker::new(&map, 2);
    let mut st = car([0.0, 0.0, 1.0], 0.0, [0.0; 3]);
    st.gearbox_state = 1;
    st.wheels[1].contact_material_id = 0x7ABC_0002; // grass (2) with high bits set: group 1
    st.wheels[2].contact_material_id = 7; // turbo: group 3
    st.wheels[3].contact_material_id = 3; // ice: group 4, none of the 4 one-hot slots
    let counts: Vec<f32> = (0..3).map(|_| build(&c, &st, &map, &mut tr)[24]).collect();
    assert_eq!(counts, vec![0.0, 1.0, 2.0], "1 + previous while the gearbox changes");
    st.gearbox_state = 0;
    let x = build(&c, &st, &map, &mut tr);
    assert_eq!(x[24], 0.0);
    assert_eq!(&x[25..41], &[1., 0., 0., 0., 0., 1., 0., 0., 0., 0., 0., 1., 0., 0., 0., 0.]);
    tr.record_keys([false, true, false, true]);
    let x = build(&c, &st, &map, &mut tr);
    assert_eq!(
        &x[1..9],
        &[1., 0., 0., 0., 0., 1., 0., 1.],
        "forward padding, then the brake+right"
    );
    st.wheels[0].contact_material_id = 31;
    let b = FloatBuilder::new(&c);
    let mut out = vec![0f32; b.float_dim()];
    let e = b.build(&st, &map, &mut tr, &mut out).unwrap_err();
    assert!(matches!(e, EnvError::Game(_)), "{e}");
    assert!(e.to_string().contains("wheel 0: contact material id 31"), "{e}");
}

#[test]
fn zone_tracking_follows_the_original() {
    let c = cfg();
    let p = ZoneParams::from_config(&c);
    rulka_test_support::margin::close(
        "p.max_dist_to_vcp vs (0.25f64.powi(2) + 45f64.powi(2)).sqrt()",
        p.max_dist_to_vcp,
        (0.25f64.powi(2) + 45f64.powi(2)).sqrt(),
        1e-12,
    );
    let map = ZoneMap::new(&straight(100.0), p).unwrap();
    assert_eq!((map.start_index(), map.last_index()), (20, 220));
    rulka_test_support::margin::close(
        "map.start_distance() vs 9.75",
        map.start_distance(),
        9.75,
        1e-12,
    );
    // Forward step by step: nearest point, never past the finish.
    assert_eq!(map.update(20, [0.0, 0.0, 7.1]), 34);
    assert_eq!(map.update(215, [0.0, 0.0, 120.0]), 220, "never past the finish's zone");
    // A car 50 m from the next centre (beyond the 45 m reach) is not tracked there.
    assert_eq!(map.update(20, [0.0, 0.0, 50.0]), 20);
    // Back: the previous centre must be strictly closer.
    assert_eq!(map.update(220, [0.0, 0.0, 99.0]), 218);
    // Out of reach (> 45 m from the next centre): no advance.
    assert_eq!(map.update(20, [60.0, 0.0, 5.0]), 20);
    // Below the deck height: no tracking at all.
    let mut deck = p;
    deck.deck_height = 1.0;
    let dmap = ZoneMap::new(&straight(100.0), deck).unwrap();
    assert_eq!(dmap.update(20, [0.0, 0.0, 7.1]), 20);
    assert_eq!(dmap.update(20, [0.0, 2.0, 7.1]), 34);
    // A real checkpoint at 30 m gates the zone matched to it (12 m, ±200 points).
    let gated = ZoneMap::new(&straight(100.0), p).unwrap().with_checkpoints(&[[30.0, 0.0, 30.0]]);
    // The centres within 12 m of (30, 0, 30) are none (30 m off the line): no gate.
    assert_eq!(gated.update(20, [0.0, 0.0, 40.0]), 100);
    let gated = ZoneMap::new(&straight(100.0), p).unwrap().with_checkpoints(&[[5.0, 0.0, 30.0]]);
    // Matched to the centre at 30 m (index 80): the car must pass within 12 m of the checkpoint.
    assert_eq!(gated.update(20, [0.0, 0.0, 40.0]), 100, "passing 5 m from it");
    let gate = ZoneMap::new(&straight(100.0), p).unwrap().with_checkpoints(&[[11.9, 0.0, 30.0]]);
    assert_eq!(gate.update(79, [0.0, 0.0, 30.5]), 81, "11.91 m from it: through");
    assert_eq!(gate.update(79, [-1.0, 0.0, 30.5]), 80, "12.91 m from it: stuck at the gate");
    assert_eq!(gate.update(79, [0.0, 0.0, 40.0]), 80, "15.5 m from it: stuck at the gate");
    // Distance along the line and the margin.
    rulka_test_support::margin::close(
        "map.distance(45, [0.0, 0.0, 12.3]) vs (12.3 + 9.75)",
        map.distance(45, [0.0, 0.0, 12.3]),
        12.3 + 9.75,
        1e-9,
    );
    rulka_test_support::margin::close(
        "map.margin(map.start_distance()) vs 100.75",
        map.margin(map.start_distance()),
        100.75,
        1e-9,
    );
    // A reference line that stops for 12 points (smoothing spans ±5) is named.
    let mut bad = straight(20.0);
    for _ in 0..12 {
        bad.insert(20, bad[20]);
    }
    let e = ZoneMap::new(&bad, p).unwrap_err().to_string();
    assert!(e.contains("coincide"), "{e}");
}

/// A state with a non-finite position or speed builds non-finite floats (the
/// collector then quarantines the trajectory, naming the float); nothing
/// panics and the zone index stays where it was.
#[test]
fn non_finite_states_never_panic() {
    let c = cfg();
    let map = ZoneMap::new(&straight(100.0), ZoneParams::from_config(&c)).unwrap();
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut tr = ProgressTracker::new(&map, 2);
        let st = car([0.0, bad, bad], 0.0, [bad, 0.0, 0.0]);
        let b = FloatBuilder::new(&c);
        let mut out = vec![0f32; b.float_dim()];
        b.build(&st, &map, &mut tr, &mut out).unwrap();
        assert_eq!(tr.zone, 20, "{bad}: no tracking from a non-finite position");
        assert!(!out[44].is_finite(), "{bad}: lateral velocity");
        assert!(out[50..56].iter().any(|x| !x.is_finite()), "{bad}: zone centres");
    }
}
