#![allow(clippy::unwrap_used)]
//! The TMInterface client against the protocol server wrapping the simulator,
//! which behaves as the original's plugin (commands answered only inside sync
//! calls, real-layout states): every message type round-trips, driving the
//! game path equals driving the simulator directly — floats built from the
//! decoded game state, through map loads, rewinds to the start state, finishes
//! and cut-offs — and a stalling, disconnecting or malformed server gives a
//! clear error quickly, never a hang.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rulka_config::{Config, MapEntry, TrackPreset};
use rulka_env::{
    bgra_to_gray, reference_line, Autopilot, EnvError, Environment, GameState, SimEnv, SimServer,
    SimServerFault, SimServerReceived, Status, TmiClient, TmiEnv, TmiSync, Track,
};

fn cfg() -> Config {
    let mut c = Config::default();
    c.environment.sim.track = TrackPreset::Easy;
    c.environment.n_prev_actions_in_inputs = 3;
    c.environment.n_zone_centers_in_inputs = 8;
    c.environment.tmi.timeout_ms = 500;
    c
}

/// `cfg()` with maps for the simulator's tracks `seeds` (the server loads
/// `map <seed>`), their reference lines written as `.npy` into `dir`.
fn with_maps(mut c: Config, dir: &Path, seeds: &[u64]) -> Config {
    for &s in seeds {
        let path: PathBuf = dir.join(format!("sim{s}.npy"));
        let line = reference_line(&Track::generate(s, c.environment.sim.track));
        rulka_env::write_points(&path, &line).unwrap();
        c.environment.tmi.maps.push(MapEntry {
            name: format!("sim{s}"),
            map_path: s.to_string(),
            zone_centers: path,
            checkpoints: None,
        });
    }
    c
}

#[test]
fn every_message_type_round_trips() {
    let c = cfg();
    let server = SimServer::start(&c, 0, SimServerFault::None).unwrap();
    // A bound, not a speed: the tests run four at a time on a loaded machine.
    let mut cl = TmiClient::connect("127.0.0.1", server.port(), Duration::from_secs(30)).unwrap();
    let on_connect = cl.read_sync().unwrap();
    assert_eq!(on_connect, TmiSync::OnConnect);
    cl.set_on_step_period(50).unwrap();
    assert!(cl.is_in_menus().unwrap(), "no map loaded yet");
    cl.execute_command("map 3").unwrap();
    assert!(!cl.is_in_menus().unwrap());
    cl.set_timeout(1234).unwrap();
    cl.toggle_interface(true).unwrap();
    cl.reset_camera().unwrap();
    cl.set_speed(4.0).unwrap();
    cl.respond(&on_connect).unwrap();
    // The countdown: run steps at negative race times, then 0.
    assert_eq!(cl.read_sync().unwrap(), TmiSync::RunStep(-50));
    cl.respond(&TmiSync::RunStep(-50)).unwrap();
    let zero = cl.read_sync().unwrap();
    assert_eq!(zero, TmiSync::RunStep(0));
    let start = cl.get_simulation_state().unwrap();
    let st = GameState::decode(&start).unwrap();
    assert_eq!((st.race_time(), st.cp_times.len()), (0, 1));
    assert_eq!(st.cp_times[0].time, -1, "the finish not yet passed");
    cl.set_input_state(false, false, true, false).unwrap();
    cl.respond(&zero).unwrap();
    let step = cl.read_sync().unwrap();
    assert_eq!(step, TmiSync::RunStep(50), "one period of 50 ms");
    cl.set_speed(0.0).unwrap();
    cl.request_frame(64, 64).unwrap();
    cl.respond(&step).unwrap();
    let fr = cl.read_sync().unwrap();
    assert_eq!(fr, TmiSync::RequestedFrame);
    let bgra = cl.read_frame(64, 64).unwrap();
    // The same frame, rendered by a local simulator after the same decision.
    let mut local = SimEnv::new(&c);
    local.reset(3).unwrap();
    local.step(&[0]).unwrap();
    let mut want = vec![0u8; 64 * 64];
    local.render(&mut want).unwrap();
    let mut gray = vec![0u8; 64 * 64];
    bgra_to_gray(&bgra, &mut gray);
    assert_eq!(gray, want);
    // Inside the frame sync: every other command.
    assert!(!cl.race_finished().unwrap());
    assert_eq!(cl.get_inputs().unwrap(), "[true, false, false, false]");
    let after = GameState::decode(&cl.get_simulation_state().unwrap()).unwrap();
    assert_eq!(after.race_time(), 50);
    cl.rewind_to_state(&start).unwrap();
    assert_eq!(
        cl.get_simulation_state().unwrap(),
        start,
        "rewind restores the start state exactly"
    );
    cl.rewind_to_current_state().unwrap();
    cl.prevent_simulation_finish().unwrap();
    cl.unrequest_frame().unwrap();
    cl.give_up().unwrap();
    cl.shutdown().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server.received().contains(&SimServerReceived::Shutdown) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    use SimServerReceived::*;
    assert_eq!(
        server.received(),
        vec![
            SetOnStepPeriod(50),
            IsInMenus,
            ExecuteCommand("map 3".into()),
            IsInMenus,
            SetTimeout(1234),
            ToggleInterface(1),
            ResetCamera,
            SetSpeed(4.0),
            Response(5),
            Response(1),
            GetSimulationState,
            SetInputState([0, 0, 1, 0]),
            Response(1),
            SetSpeed(0.0),
            RequestFrame(64, 64),
            Response(1),
            RaceFinished,
            GetInputs,
            GetSimulationState,
            RewindToState(start.len()),
            GetSimulationState,
            RewindToCurrentState,
            PreventSimulationFinish,
            UnrequestFrame,
            GiveUp,
            Shutdown,
        ]
    );
}

/// The plugin reads commands only while it waits in a sync call: a command
/// sent while the game is paused outside one gets no answer. (A client that
/// asks for the state after answering the run step, as rulka's first game
/// client did, hangs against the real game.)
#[test]
fn a_command_outside_a_sync_call_is_not_answered() {
    let c = cfg();
    let server = SimServer::start(&c, 0, SimServerFault::None).unwrap();
    let mut cl =
        TmiClient::connect("127.0.0.1", server.port(), Duration::from_millis(300)).unwrap();
    let on_connect = cl.read_sync().unwrap();
    cl.execute_command("map 1").unwrap();
    cl.set_speed(0.0).unwrap();
    cl.respond(&on_connect).unwrap();
    let e = cl.get_simulation_state().unwrap_err();
    assert!(matches!(e, EnvError::Timeout { .. }), "{e}");
}

#[test]
fn opencv_gray_weights() {
    let mut g = [0u8; 4];
    // BGRA: pure blue, green, red, white.
    bgra_to_gray(&[255, 0, 0, 255, 0, 255, 0, 255, 0, 0, 255, 255, 255, 255, 255, 255], &mut g);
    assert_eq!(g, [29, 150, 76, 255], "OpenCV's BGRA2GRAY values");
}

/// Rollouts through the protocol — map loads, the countdown, rewinds to the
/// saved start state, the finish patch, a cut-off — give bit for bit the
/// frames, floats, reward ingredients and statuses of the simulator driven
/// directly: the game path's state decoding and float building are exact.
#[test]
fn driving_through_the_protocol_equals_driving_the_simulator() {
    let dir = tempfile::tempdir().unwrap();
    let c = with_maps(cfg(), dir.path(), &[1, 2]);
    let server = SimServer::start(&c, 0, SimServerFault::None).unwrap();
    let mut remote = TmiEnv::connect(&c, "127.0.0.1", server.port()).unwrap();
    let mut local = SimEnv::new(&c);
    let pilot = Autopilot::new(&c);
    let (fl, nf) = local.obs_sizes();
    // (map index, track seed, drive or coast)
    for (map, seed, drive) in [(0u64, 1u64, true), (0, 1, true), (1, 2, true), (0, 1, false)] {
        remote.reset(map).unwrap();
        local.reset(seed).unwrap();
        let (mut fa, mut fb, mut xa, mut xb) =
            (vec![0u8; fl], vec![0u8; fl], vec![0f32; nf], vec![0f32; nf]);
        let mut steps = 0;
        let mut status = Status::Running;
        loop {
            remote.observe(&mut fa, &mut xa).unwrap();
            local.observe(&mut fb, &mut xb).unwrap();
            assert_eq!(fa, fb, "frame at step {steps} of map {map}");
            assert_eq!(xa, xb, "floats at step {steps} of map {map}");
            assert_eq!(remote.ingredients(), local.ingredients(), "step {steps}");
            if status.is_done() {
                break; // the terminal observation was compared too
            }
            let a = if drive { pilot.act(&xa) } else { 3 };
            let (ra, rb) = (remote.step(&[a]).unwrap(), local.step(&[a]).unwrap());
            assert_eq!(ra, rb, "status at step {steps}");
            status = ra;
            steps += 1;
        }
        if drive {
            assert!(matches!(status, Status::Finished { .. }), "map {map}: {status:?}");
        } else {
            assert!(matches!(status, Status::CutOff(_)), "coasting: {status:?}");
        }
        assert_eq!(remote.tracker(), local.tracker());
    }
    // The finish was patched and rewound to (cp_times' last entry −1), never left to end the race.
    let log = server.received();
    let finishes =
        log.windows(2).filter(|w| matches!(w[1], SimServerReceived::RewindToState(_))).count();
    assert!(finishes >= 3, "{log:?}");
}

fn fails_quickly(fault: SimServerFault, expect: &str) {
    let dir = tempfile::tempdir().unwrap();
    let c = with_maps(cfg(), dir.path(), &[0]);
    let server = SimServer::start(&c, 0, fault).unwrap();
    let t0 = Instant::now();
    let r = (|| -> Result<(), EnvError> {
        let mut env = TmiEnv::connect(&c, "127.0.0.1", server.port())?;
        let (fl, nf) = env.obs_sizes();
        let (mut f, mut x) = (vec![0u8; fl], vec![0f32; nf]);
        env.reset(0)?;
        for _ in 0..20 {
            env.observe(&mut f, &mut x)?;
            env.step(&[0])?;
        }
        Ok(())
    })();
    let e = r.expect_err("the fault must surface as an error");
    assert!(e.to_string().contains(expect), "{fault:?}: {e}");
    assert!(t0.elapsed() < Duration::from_secs(3), "{fault:?} took {:?}", t0.elapsed());
}

#[test]
fn a_stalled_server_times_out() {
    fails_quickly(SimServerFault::Stall { after: 6 }, "no reply");
}

#[test]
fn a_disconnect_mid_message_is_named() {
    // Messages: on-connect, run steps −50 and 0, the start state, the state, then the first frame.
    fails_quickly(
        SimServerFault::DisconnectMidMessage { after: 5 },
        "connection closed during reading a frame",
    );
}

#[test]
fn a_malformed_message_is_named() {
    // Message 1 is the first run-step sync, where a sync call is expected.
    fails_quickly(SimServerFault::Malformed { after: 1 }, "unknown message type 999");
}

#[test]
fn missing_or_malformed_map_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg();
    c.environment.tmi.maps.push(MapEntry {
        name: "A01".into(),
        map_path: "A01-Race.Challenge.Gbx".into(),
        zone_centers: dir.path().join("nope.npy"),
        checkpoints: None,
    });
    let e = TmiEnv::connect(&c, "127.0.0.1", 1).unwrap_err().to_string();
    assert!(e.contains("map A01") && e.contains("nope.npy"), "{e}");
    std::fs::write(dir.path().join("nope.npy"), b"not numpy").unwrap();
    let e = TmiEnv::connect(&c, "127.0.0.1", 1).unwrap_err().to_string();
    assert!(e.contains("not a NumPy .npy file"), "{e}");
}

/// Waiting for a game's first message: bytes that come late (a game's
/// plugin answers after its own loop turns) are waited for up to the
/// timeout; `stop` ends the wait within a slice; a game that never speaks
/// is a timeout naming the wait.
#[test]
fn the_first_message_is_awaited_until_the_timeout_and_a_stop_ends_the_wait() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let mut held = Vec::new();
        for delay_ms in [500u64, 0, 0] {
            let (mut s, _) = listener.accept().unwrap();
            if delay_ms > 0 {
                std::thread::sleep(Duration::from_millis(delay_ms));
                std::io::Write::write_all(&mut s, &[1]).unwrap();
            }
            held.push(s);
        }
        // Reset: closed with the client's bytes unread (the kernel sends RST).
        let (s, _) = listener.accept().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        drop(s);
        held
    });
    // Late: a byte after 500 ms, within the 3 s timeout.
    let mut c = TmiClient::connect("127.0.0.1", port, Duration::from_secs(3)).unwrap();
    assert!(c.wait_readable(&mut || false).unwrap());
    // Silent, stopped after 300 ms: ends within a slice of the stop.
    let mut c = TmiClient::connect("127.0.0.1", port, Duration::from_secs(3)).unwrap();
    let t0 = Instant::now();
    let stopped = c.wait_readable(&mut || t0.elapsed() > Duration::from_millis(300)).unwrap();
    assert!(!stopped);
    assert!(t0.elapsed() < Duration::from_millis(1500), "{:?}", t0.elapsed());
    // Silent, never stopped: a timeout after the client's 600 ms.
    let mut c = TmiClient::connect("127.0.0.1", port, Duration::from_millis(600)).unwrap();
    let t0 = Instant::now();
    let e = c.wait_readable(&mut || false).unwrap_err();
    assert!(t0.elapsed() >= Duration::from_millis(550), "{:?}", t0.elapsed());
    assert!(matches!(&e, EnvError::Timeout { op, .. } if op.contains("first message")), "{e}");
    // Reset by the game while waiting: an error at once, not a wait.
    let mut c = TmiClient::connect("127.0.0.1", port, Duration::from_secs(3)).unwrap();
    c.set_speed(1.0).unwrap();
    c.flush().unwrap();
    let t0 = Instant::now();
    let e = c.wait_readable(&mut || false).unwrap_err();
    assert!(matches!(&e, EnvError::Io { .. }), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    drop(server.join().unwrap());
}

/// A dropped environment releases the game: `C_SHUTDOWN` reaches it (the
/// client sends what is still queued when it goes).
#[test]
fn a_dropped_environment_tells_the_game_it_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let c = with_maps(cfg(), dir.path(), &[1]);
    let server = SimServer::start(&c, 0, SimServerFault::None).unwrap();
    let env = TmiEnv::connect(&c, "127.0.0.1", server.port()).unwrap();
    drop(env);
    let t0 = Instant::now();
    while !server.received().contains(&SimServerReceived::Shutdown) {
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", server.received());
        std::thread::sleep(Duration::from_millis(20));
    }
}
