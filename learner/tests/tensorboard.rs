//! TensorBoard event files: CRC check value, round trip, and TensorBoard's own reader.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::process::Command;

use rulka_learner::{crc32c, read_events, EventWriter};
use rulka_test_support::venv_python;

#[test]
fn crc32c_standard_check_value() {
    // The CRC-32C check value of "123456789" (RFC 3720 / every CRC catalogue).
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    assert_eq!(crc32c(b""), 0);
}

#[test]
fn scalars_round_trip_and_tensorboard_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = EventWriter::create(dir.path()).unwrap();
    for step in 0..5i64 {
        w.scalar("Training/grpo_loss", step * 1000, 0.5 - step as f64 * 0.1).unwrap();
        w.scalar("Race/progress", step * 1000, step as f64).unwrap();
    }
    w.flush().unwrap();
    let path = w.path().to_path_buf();
    drop(w);
    let events = read_events(&path).unwrap();
    assert_eq!(events[0].file_version.as_deref(), Some("brain.Event:2"));
    let losses: Vec<(i64, f32)> = events
        .iter()
        .filter_map(|e| e.summary.as_ref().map(|s| (e.step, &s.value[0])))
        .filter(|(_, v)| v.tag == "Training/grpo_loss")
        .map(|(s, v)| (s, v.simple_value.unwrap()))
        .collect();
    assert_eq!(losses.len(), 5);
    assert_eq!(losses[4], (4000, (0.5f64 - 0.4) as f32));
    // A flipped byte is caught by the record CRC.
    let mut bytes = std::fs::read(&path).unwrap();
    let n = bytes.len();
    bytes[n - 6] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    assert!(read_events(&path).unwrap_err().to_string().contains("CRC"));
    bytes[n - 6] ^= 1;
    std::fs::write(&path, &bytes).unwrap();

    let Some(python) = venv_python("TensorBoard's reader") else { return };
    let script = "import sys\nfrom tensorboard.backend.event_processing.event_accumulator import EventAccumulator\nacc = EventAccumulator(sys.argv[1]); acc.Reload()\nfor tag in sorted(acc.Tags()['scalars']):\n    print(tag, [(e.step, round(e.value, 4)) for e in acc.Scalars(tag)])\n";
    let out = Command::new(python).arg("-c").arg(script).arg(dir.path()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains(
            "Race/progress [(0, 0.0), (1000, 1.0), (2000, 2.0), (3000, 3.0), (4000, 4.0)]"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "Training/grpo_loss [(0, 0.5), (1000, 0.4), (2000, 0.3), (3000, 0.2), (4000, 0.1)]"
        ),
        "{text}"
    );
}
