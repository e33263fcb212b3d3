//! A real ONNX Runtime session over a committed fixture (`fixtures/tiny_gemm.onnx`,
//! y = relu(x·W + b) with small integer weights), checked against hand-computed values.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use std::path::{Path, PathBuf};

use rulka_inference::{InferenceError, Model, ModelSource};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tiny_gemm.onnx")
}

#[test]
fn runs_the_fixture_and_matches_hand_computed_outputs() {
    let rt = rulka_inference::load_runtime(None).expect("scripts/setup.sh installs ONNX Runtime");
    assert!(rt.library_path().to_string_lossy().contains("libonnxruntime"));
    let mut model = Model::open(rt, ModelSource::File(fixture()), 1).unwrap();
    assert_eq!(model.input_names(), ["x"]);
    assert_eq!(model.output_names(), ["y"]);
    // W = [[1,0,-1],[2,1,0],[0,-1,1],[1,1,1]], b = [0.5,-0.5,0]
    // [1,2,3,4]·W = [9,3,6] → +b → [9.5,2.5,6]; [-1,-1,-1,-1]·W = [-4,0,-1] → relu → 0
    let x = [1.0, 2.0, 3.0, 4.0, -1.0, -1.0, -1.0, -1.0];
    let (shape, y) = model.run_f32(&[("x", &[2, 4], &x)], "y").unwrap();
    assert_eq!(shape, [2, 3]);
    assert_eq!(y, [9.5, 2.5, 6.0, 0.0, 0.0, 0.0]);
}

#[test]
fn the_same_model_loads_from_memory() {
    let rt = rulka_inference::load_runtime(None).unwrap();
    let bytes = std::fs::read(fixture()).unwrap();
    let mut model = Model::open(rt, ModelSource::Bytes(bytes), 1).unwrap();
    let (_, y) = model.run_f32(&[("x", &[1, 4], &[0.0, 0.0, 0.0, 0.0])], "y").unwrap();
    assert_eq!(y, [0.5, 0.0, 0.0]);
}

#[test]
fn bad_inputs_are_typed_errors_naming_the_problem() {
    let rt = rulka_inference::load_runtime(None).unwrap();
    let mut model = Model::open(rt, ModelSource::File(fixture()), 1).unwrap();
    let e = model.run_f32(&[("x", &[1, 4], &[1.0, 2.0])], "y").unwrap_err();
    assert!(matches!(e, InferenceError::Run { .. }), "{e}");
    assert!(e.to_string().contains("needs 4 values, got 2"), "{e}");
    let e = model.run_f32(&[("x", &[1, 3], &[1.0, 2.0, 3.0])], "y").unwrap_err();
    assert!(matches!(e, InferenceError::Run { .. }), "{e}");
    let e = model.run_f32(&[("x", &[1, 4], &[0.0; 4])], "logits").unwrap_err();
    assert!(e.to_string().contains("no output named logits"), "{e}");

    let e = Model::open(rt, ModelSource::File("/nonexistent/m.onnx".into()), 1).unwrap_err();
    assert!(matches!(e, InferenceError::Session { .. }), "{e}");
    let e = Model::open(rt, ModelSource::Bytes(b"not a model".to_vec()), 1).unwrap_err();
    assert!(matches!(e, InferenceError::Session { ref model, .. } if model == "<memory>"), "{e}");
}

#[test]
fn an_explicit_missing_library_is_reported_not_ignored() {
    let e = rulka_inference::locate_runtime(Some(Path::new("/nonexistent/libonnxruntime.so")))
        .unwrap_err();
    assert!(matches!(e, InferenceError::RuntimeLoad { .. }), "{e}");
    assert!(e.to_string().contains("/nonexistent/libonnxruntime.so"), "{e}");
}
