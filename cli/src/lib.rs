//! Library side of the `rulka` command line, shared by its two binaries
//! (`rulka`, which loads no libtorch, and `rulka-torch`): the exit code an
//! error stops a binary with.
//!
//! ```
//! use rulka_error::ErrorKind;
//!
//! let bad = anyhow::Error::new(rulka_run::BadInput("--id 9: the run has 2 slots".into()));
//! assert_eq!(rulka_cli::error_kind(&bad), ErrorKind::BadInput);
//! assert_eq!(rulka_cli::error_kind(&anyhow::anyhow!("disk full")).exit_code(), 1);
//! ```

mod exit;
pub mod numbers;

pub use exit::{error_kind, error_kind_with, report_error};
