#![allow(clippy::unwrap_used)]
//! The TMInterface client against the protocol server wrapping the simulator:
//! every message type round-trips, driving through the protocol equals
//! driving the simulator directly, and a stalling, disconnecting or
//! malformed server gives a clear error quickly — never a hang.

use std::time::{Duration, Instant};

use rulka_config::{Config, TrackPreset};
use rulka_env::sim::{Autopilot, SimEnv, SimState};
use rulka_env::tmi::server::{Fault, Received, SimServer};
use rulka_env::tmi::{bgra_to_gray, Client, Sync, TmiEnv};
use rulka_env::{EnvError, Environment, Status};

fn cfg() -> Config {
    let mut c = Config::default();
    c.environment.sim.track = TrackPreset::Easy;
    c.environment.n_prev_actions_in_inputs = 3;
    c.environment.n_zone_centers_in_inputs = 8;
    c.environment.tmi.timeout_ms = 500;
    c
}

#[test]
fn every_message_type_round_trips() {
    let c = cfg();
    let server = SimServer::start(&c, 0, Fault::None).unwrap();
    let mut cl = Client::connect("127.0.0.1", server.port(), Duration::from_secs(2)).unwrap();
    let on_connect = cl.read_sync().unwrap();
    assert_eq!(on_connect, Sync::OnConnect);
    cl.set_on_step_period(50).unwrap();
    cl.execute_command("map 3").unwrap();
    cl.set_timeout(1234).unwrap();
    cl.toggle_interface(true).unwrap();
    cl.reset_camera().unwrap();
    cl.respond(&on_connect).unwrap();
    let start = cl.get_simulation_state().unwrap();
    let st = SimState::decode(&start).unwrap();
    assert_eq!((st.seed, st.time_ms), (3, 0));
    cl.set_input_state(false, false, true, false).unwrap();
    cl.set_speed(4.0).unwrap();
    let step = cl.read_sync().unwrap();
    assert_eq!(step, Sync::RunStep(50), "one period of 50 ms");
    cl.set_speed(0.0).unwrap();
    cl.respond(&step).unwrap();
    cl.request_frame(64, 64).unwrap();
    let fr = cl.read_sync().unwrap();
    assert_eq!(fr, Sync::RequestedFrame);
    let bgra = cl.read_frame(64, 64).unwrap();
    cl.respond(&fr).unwrap();
    // The same frame, rendered by a local simulator after the same decision.
    let mut local = SimEnv::new(&c);
    local.reset(3).unwrap();
    local.step(&[0]).unwrap();
    let mut want = vec![0u8; 64 * 64];
    local.render(&mut want).unwrap();
    let mut gray = vec![0u8; 64 * 64];
    bgra_to_gray(&bgra, &mut gray);
    assert_eq!(gray, want);
    assert!(!cl.race_finished().unwrap());
    assert!(!cl.is_in_menus().unwrap());
    assert_eq!(cl.get_inputs().unwrap(), "[true, false, false, false]");
    cl.rewind_to_state(&start).unwrap();
    let back = SimState::decode(&cl.get_simulation_state().unwrap()).unwrap();
    assert_eq!(back, st, "rewind restores the start state exactly");
    cl.rewind_to_current_state().unwrap();
    cl.prevent_simulation_finish().unwrap();
    cl.unrequest_frame().unwrap();
    cl.give_up().unwrap();
    cl.shutdown().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server.received().contains(&Received::Shutdown) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    use Received::*;
    assert_eq!(
        server.received(),
        vec![
            SetOnStepPeriod(50),
            ExecuteCommand("map 3".into()),
            SetTimeout(1234),
            ToggleInterface(1),
            ResetCamera,
            Response(5),
            GetSimulationState,
            SetInputState([0, 0, 1, 0]),
            SetSpeed(4.0),
            SetSpeed(0.0),
            Response(1),
            RequestFrame(64, 64),
            Response(4),
            RaceFinished,
            IsInMenus,
            GetInputs,
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

#[test]
fn opencv_gray_weights() {
    let mut g = [0u8; 4];
    // BGRA: pure blue, green, red, white.
    bgra_to_gray(&[255, 0, 0, 255, 0, 255, 0, 255, 0, 0, 255, 255, 255, 255, 255, 255], &mut g);
    assert_eq!(g, [29, 150, 76, 255], "OpenCV's BGRA2GRAY values");
}

#[test]
fn driving_through_the_protocol_equals_driving_the_simulator() {
    let c = cfg();
    let server = SimServer::start(&c, 0, Fault::None).unwrap();
    let mut remote = TmiEnv::connect(&c, "127.0.0.1", server.port()).unwrap();
    let mut local = SimEnv::new(&c);
    let pilot = Autopilot::new(&c);
    let (fl, nf) = local.obs_sizes();
    for seed in [1u64, 2, 1] {
        remote.reset(seed).unwrap();
        local.reset(seed).unwrap();
        let (mut fa, mut fb, mut xa, mut xb) =
            (vec![0u8; fl], vec![0u8; fl], vec![0f32; nf], vec![0f32; nf]);
        let mut steps = 0;
        let status = loop {
            remote.observe(&mut fa, &mut xa).unwrap();
            local.observe(&mut fb, &mut xb).unwrap();
            assert_eq!(fa, fb, "frame at step {steps}");
            assert_eq!(xa, xb, "floats at step {steps}");
            assert_eq!(remote.ingredients(), local.ingredients());
            let a = pilot.act(&xa);
            let (ra, rb) = (remote.step(&[a]).unwrap(), local.step(&[a]).unwrap());
            assert_eq!(ra, rb, "status at step {steps}");
            steps += 1;
            if ra.is_done() {
                break ra;
            }
        };
        assert!(matches!(status, Status::Finished { .. }), "{status:?}");
        assert_eq!(remote.ingredients(), local.ingredients());
    }
}

fn fails_quickly(fault: Fault, expect: &str) {
    let c = cfg();
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
    fails_quickly(Fault::Stall { after: 6 }, "no reply");
}

#[test]
fn a_disconnect_mid_message_is_named() {
    // Message 4 is the first frame (on-connect, state, state, frame).
    fails_quickly(
        Fault::DisconnectMidMessage { after: 3 },
        "connection closed during reading a frame",
    );
}

#[test]
fn a_malformed_message_is_named() {
    // Message 5 is the first run-step sync, where a sync call is expected.
    fails_quickly(Fault::Malformed { after: 4 }, "unknown message type 999");
}
