//! `rulka tmi inspect` and `rulka sim export-map` as a user runs them: states
//! produced by `rulka sim serve` (a separate process, driven over the
//! TMInterface protocol) decode to the float vector the simulator's
//! collector feeds the network at the same step, bit for bit.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rulka_config::Config;
use rulka_env::{Environment, SimEnv, TmiClient, TmiSync};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rulka"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The same on a real map's shape (`environment.sim.track_from`): the
/// simulator's floats on both real lines, heights included, are what
/// `rulka tmi inspect` makes of the state with that map's own `.npy`.
#[test]
fn inspect_matches_the_collector_on_a_real_maps_shape() {
    for name in ["ESL-Hockolicious_0.5m_cl2.npy", "map5_0.5m_cl.npy"] {
        let dir = tempfile::tempdir().unwrap();
        let map = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/data/maps")
            .join(name)
            .canonicalize()
            .unwrap();
        let yaml = format!(
            "environment: {{n_zone_centers_in_inputs: 10, n_prev_actions_in_inputs: 5, sim: {{track_from: {}}}}}\n",
            map.display()
        );
        // Full throttle with some steering: 2 s along the line.
        let actions: Vec<u8> = (0..40).map(|k| [0, 0, 2, 0, 3][k % 5]).collect();
        let (saved, floats) =
            drive_and_inspect(dir.path(), &yaml, &map, "map \"My Map.Challenge.Gbx\"", 0, &actions);
        assert_eq!(saved.len(), 41);
        // Both lines start 9–11 m up: the car rides the map's height.
        let v: serde_json::Value = serde_json::from_slice(
            &bin().args(["tmi", "inspect", "--json"]).arg(&saved[40]).output().unwrap().stdout,
        )
        .unwrap();
        let y = v["position"][1].as_f64().unwrap();
        assert!(y > 5.0, "{name}: the car rides the map's height: y = {y}");
        assert!(floats.iter().all(|x| x.is_finite()));
    }
}

/// Drives `rulka sim serve` (config `yaml`) over the protocol with fixed
/// actions, saving the state at every decision, and checks that `rulka tmi
/// inspect` of each saved state with `map` gives the float vector the
/// simulator's collector builds at that step. Returns the saved states and
/// the last float vector.
fn drive_and_inspect(
    dir: &Path,
    yaml: &str,
    map: &Path,
    map_cmd: &str,
    seed: u64,
    actions: &[u8],
) -> (Vec<std::path::PathBuf>, Vec<f32>) {
    let cfg_path = dir.join("c.yaml");
    std::fs::write(&cfg_path, yaml).unwrap();
    let cfg = Config::from_yaml_str(yaml, "c.yaml").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let _server =
        rulka_test_support::sim_game(Path::new(env!("CARGO_BIN_EXE_rulka")), &cfg_path, port, &[]);
    let t0 = Instant::now();
    let mut cl = loop {
        // Each call's timeout is a bound, not a speed: the server is another
        // process on a loaded machine (the tests run four at a time).
        match TmiClient::connect("127.0.0.1", port, Duration::from_secs(60)) {
            Ok(c) => break c,
            Err(_) if t0.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("server did not start: {e}"),
        }
    };
    // Drive the server's race as the game is driven, saving the state at every decision.
    let on_connect = cl.read_sync().unwrap();
    assert_eq!(on_connect, TmiSync::OnConnect);
    cl.set_on_step_period(50).unwrap();
    cl.execute_command(map_cmd).unwrap();
    cl.set_speed(1.0).unwrap();
    cl.respond(&on_connect).unwrap();
    let mut saved = Vec::new();
    loop {
        let call = cl.read_sync().unwrap();
        if let TmiSync::RunStep(t) = call {
            if t >= 0 {
                let k = (t / 50) as usize;
                let p = dir.join(format!("state{k}.bin"));
                std::fs::write(&p, cl.get_simulation_state().unwrap()).unwrap();
                saved.push(p);
                if k == actions.len() {
                    break;
                }
                let [gas, brake, left, right] = rulka_config::ACTION_KEYS[actions[k] as usize];
                cl.set_input_state(left, right, gas, brake).unwrap();
            }
        }
        cl.respond(&call).unwrap();
    }

    let mut env = SimEnv::new(&cfg);
    env.reset(seed).unwrap();
    let (fl, nf) = env.obs_sizes();
    let (mut frame, mut floats) = (vec![0u8; fl], vec![0f32; nf]);
    for (k, state) in saved.iter().enumerate() {
        env.observe(&mut frame, &mut floats).unwrap();
        let prev: Vec<String> = actions[..k].iter().map(u8::to_string).collect();
        let mut cmd = bin();
        cmd.args(["tmi", "inspect"]).arg(state).arg("--zones").arg(map);
        cmd.arg("--config").arg(&cfg_path).arg("--json");
        // The collector's tracker is part of the state (inspect would
        // otherwise locate the zone from the position alone).
        cmd.arg("--zone-idx").arg(env.tracker().unwrap().zone.to_string());
        if !prev.is_empty() {
            cmd.arg("--prev-actions").arg(prev.join(","));
        }
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let got: Vec<f32> =
            v["floats"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
        assert_eq!(got, floats, "step {k}");
        assert_eq!(v["race_time"].as_i64(), Some(50 * k as i64));
        if k < actions.len() {
            env.step(&[actions[k]]).unwrap();
        }
    }
    (saved, floats)
}

#[test]
fn inspect_shows_the_floats_the_simulators_collector_sees() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "environment: {n_zone_centers_in_inputs: 10, n_prev_actions_in_inputs: 5, sim: {track: easy}}\n";
    let map = dir.path().join("track2.npy");
    let o = bin()
        .args(["sim", "export-map", "--seed", "2", "--track", "easy", "-o"])
        .arg(&map)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("501 points"), "{}", text(&o.stdout));
    let actions = [0, 0, 0, 2, 2, 0, 1, 0, 3, 0, 11, 0];
    let (saved, floats) = drive_and_inspect(dir.path(), yaml, &map, "map 2", 2, &actions);
    assert!(floats[floats.len() - 2] < 250.0, "the car moved along the track");

    // The text form names the slices; bad input is one line and exit 2.
    let o =
        bin().args(["tmi", "inspect"]).arg(&saved[3]).arg("--zones").arg(&map).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("race time        150 ms") && out.contains("zone_centers"), "{out}");
    let short = dir.path().join("short.bin");
    std::fs::write(&short, [0u8; 100]).unwrap();
    let o = bin().args(["tmi", "inspect"]).arg(&short).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("shorter than the 8356-byte fixed part"),
        "{}",
        text(&o.stderr)
    );
    let o = bin()
        .args(["tmi", "inspect"])
        .arg(&saved[0])
        .args(["--zones", Path::new("/no/such.npy").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("/no/such.npy"), "{}", text(&o.stderr));
}
