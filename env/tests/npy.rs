#![allow(clippy::unwrap_used)]
//! `.npy` zone-centre files: files NumPy itself wrote (f32 and f64, format
//! versions 1 and 2) read back exactly; rulka's own files read by NumPy;
//! wrong dtype, shape, order, a corrupt header and truncated data are errors
//! naming the file and the problem.

use std::path::Path;
use std::process::Command;

use rulka_env::{encode_points, parse_points, read_points, write_points, NpyError};
use rulka_test_support::venv_python;

#[test]
fn files_numpy_wrote_read_back_exactly() {
    let Some(py) = venv_python("the NumPy cross-check") else { return };
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
import numpy as np, sys
d = sys.argv[1]
a = np.array([[0.1, -2.5, 3e5], [1/3, 7.0, -0.0], [1e-7, 2.0, 9.75]])
np.save(d + "/f8.npy", a)
np.save(d + "/f4.npy", a.astype(np.float32))
np.save(d + "/fortran.npy", np.asfortranarray(np.arange(6.0).reshape(2, 3)))
np.save(d + "/wide.npy", np.zeros((4, 2)))
np.save(d + "/ints.npy", np.zeros((4, 3), dtype=np.int64))
np.save(d + "/big.npy", a.astype(">f8"))
np.lib.format.write_array(open(d + "/v2.npy", "wb"), a, version=(2, 0))
print(np.load(d + "/rulka.npy").tolist() if __import__("os").path.exists(d + "/rulka.npy") else "")
"#;
    let run = || {
        let o = Command::new(&py).arg("-c").arg(script).arg(dir.path()).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    run();
    let want = [[0.1, -2.5, 3e5], [1.0 / 3.0, 7.0, -0.0], [1e-7, 2.0, 9.75]];
    assert_eq!(read_points(&dir.path().join("f8.npy"), 2).unwrap(), want);
    assert_eq!(read_points(&dir.path().join("v2.npy"), 2).unwrap(), want);
    let f4 = read_points(&dir.path().join("f4.npy"), 2).unwrap();
    for (a, b) in f4.iter().flatten().zip(want.iter().flatten()) {
        assert_eq!(*a, f64::from(*b as f32));
    }
    let name = |f: &str, e: NpyError| {
        let s = e.to_string();
        assert!(s.contains(f), "{s}");
        s
    };
    let e = name("fortran.npy", read_points(&dir.path().join("fortran.npy"), 2).unwrap_err());
    assert!(e.contains("fortran_order is True"), "{e}");
    let e = name("wide.npy", read_points(&dir.path().join("wide.npy"), 2).unwrap_err());
    assert!(e.contains("shape (4, 2) is not (N, 3)"), "{e}");
    let e = name("ints.npy", read_points(&dir.path().join("ints.npy"), 2).unwrap_err());
    assert!(e.contains("dtype \"<i8\""), "{e}");
    let e = name("big.npy", read_points(&dir.path().join("big.npy"), 2).unwrap_err());
    assert!(e.contains("dtype \">f8\""), "{e}");
    // rulka's writer: NumPy reads the same numbers.
    write_points(&dir.path().join("rulka.npy"), &want).unwrap();
    let printed = run();
    assert_eq!(
        printed.trim(),
        "[[0.1, -2.5, 300000.0], [0.3333333333333333, 7.0, -0.0], [1e-07, 2.0, 9.75]]"
    );
}

#[test]
fn corrupt_and_truncated_files_are_named() {
    let p = Path::new("m.npy");
    let good = encode_points(&[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]);
    assert_eq!(parse_points(&good, p, 2).unwrap().len(), 2);
    assert_eq!((good.len() - 2 * 24) % 64, 0, "header padded to 64 bytes");
    let e = parse_points(&good[..good.len() - 5], p, 2).unwrap_err().to_string();
    assert!(e.contains("43 bytes of data; the header's shape and dtype need 48"), "{e}");
    let e = parse_points(b"PK\x03\x04 a zip", p, 2).unwrap_err().to_string();
    assert!(e.contains("not a NumPy .npy file"), "{e}");
    let e = parse_points(&good, p, 3).unwrap_err().to_string();
    assert!(e.contains("shape (2, 3) is not (N, 3) with N >= 3"), "{e}");
    let mut garbled = good.clone();
    garbled[8] = 0xFF; // header length past the end
    let e = parse_points(&garbled, p, 2).unwrap_err().to_string();
    assert!(e.contains("runs past the end"), "{e}");
    let mut nan = good.clone();
    let at = nan.len() - 8;
    nan[at..].copy_from_slice(&f64::NAN.to_le_bytes());
    let e = parse_points(&nan, p, 2).unwrap_err().to_string();
    assert!(e.contains("row 1 column 2 is NaN"), "{e}");
    let e = read_points(Path::new("/nonexistent/zones.npy"), 2).unwrap_err().to_string();
    assert!(e.starts_with("/nonexistent/zones.npy:"), "{e}");
}
