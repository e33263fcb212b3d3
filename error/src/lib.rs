//! What kind of failure an error is. Every library crate of rulka has one
//! boundary error type (`ShmError`, `TransportError`, `CheckpointError`,
//! `ExportError`, `InferenceError`, `EnvError`, `CollectorError`,
//! `ConfigError`, the trainer's `BadInput`) and each answers `kind()` with an
//! [`ErrorKind`]: callers match on the kind to decide what to do (wait and
//! retry, tell the user, give up), and the binaries take their exit code
//! from it ([`ErrorKind::exit_code`]) instead of from the error's type.
//!
//! ```
//! use rulka_error::ErrorKind;
//!
//! assert_eq!(ErrorKind::BadInput.exit_code(), 2);
//! assert_eq!(ErrorKind::Unavailable.exit_code(), 1);
//! assert!(ErrorKind::Unavailable.is_transient());
//! assert!(!ErrorKind::Corrupt.is_transient());
//! ```

/// The kind of a failure, as callers act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The user's input is wrong — a config, a flag, a path, credentials,
    /// TLS files, a run or a file made by another rulka version, weights for
    /// another network: the message names it; fix it and run again.
    BadInput,
    /// A peer, a server, a game or the network does not answer now; waiting
    /// and retrying is the remedy.
    Unavailable,
    /// Data on disk or on the wire is damaged (a checksum, a cut file, a
    /// value that is not finite, a message that breaks the protocol).
    Corrupt,
    /// The job ran and failed for another reason (I/O, a full disk, a
    /// runtime that refused a model).
    Failed,
}

impl ErrorKind {
    /// The process exit code of a binary that stops on this kind: 2 for
    /// [`ErrorKind::BadInput`], 1 for a job that ran and failed (0 is
    /// success and no error's).
    pub fn exit_code(self) -> u8 {
        match self {
            Self::BadInput => 2,
            Self::Unavailable | Self::Corrupt | Self::Failed => 1,
        }
    }

    /// Whether waiting and trying again can help.
    pub fn is_transient(self) -> bool {
        self == Self::Unavailable
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::BadInput => "bad input",
            Self::Unavailable => "unavailable",
            Self::Corrupt => "corrupt",
            Self::Failed => "failed",
        })
    }
}
