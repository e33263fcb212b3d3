//! The exit code of `rulka` and `rulka-torch`: from the kind of the error
//! that stopped it.

use rulka_error::ErrorKind;
use rulka_run::BadInput;

/// The kind of an error that reached a binary: a [`BadInput`] anywhere in
/// it (as the error or as a context) decides; otherwise the first error in
/// its chain (outermost first) that is one of rulka's boundary errors;
/// anything else is [`ErrorKind::Failed`]. The binaries exit with
/// [`ErrorKind::exit_code`] of it.
pub fn error_kind(e: &anyhow::Error) -> ErrorKind {
    error_kind_with(e, &|_| None)
}

/// As [`error_kind`], with `more` asked first for each error of the chain
/// (a binary's own boundary errors: `rulka-torch`'s import errors).
pub fn error_kind_with(
    e: &anyhow::Error,
    more: &dyn Fn(&(dyn std::error::Error + 'static)) -> Option<ErrorKind>,
) -> ErrorKind {
    match e.downcast_ref::<BadInput>() {
        Some(bad) => bad.kind(),
        None => e.chain().find_map(|e| more(e).or_else(|| kind_of(e))).unwrap_or(ErrorKind::Failed),
    }
}

/// Prints the error that stopped a binary on stderr — a [`BadInput`] as its
/// own one line, any other with its chain — and returns the exit code of
/// its kind ([`error_kind_with`], `more` as there).
pub fn report_error(
    e: &anyhow::Error,
    more: &dyn Fn(&(dyn std::error::Error + 'static)) -> Option<ErrorKind>,
) -> std::process::ExitCode {
    match e.downcast_ref::<BadInput>() {
        Some(bad) => eprintln!("error: {bad}"),
        None => eprintln!("error: {e:#}"),
    }
    std::process::ExitCode::from(error_kind_with(e, more).exit_code())
}

fn kind_of(e: &(dyn std::error::Error + 'static)) -> Option<ErrorKind> {
    if let Some(e) = e.downcast_ref::<BadInput>() {
        Some(e.kind())
    } else if let Some(e) = e.downcast_ref::<rulka_config::ConfigError>() {
        Some(e.kind())
    } else if let Some(e) = e.downcast_ref::<rulka_checkpoint::CheckpointError>() {
        Some(e.kind())
    } else if let Some(e) = e.downcast_ref::<rulka_export::ExportError>() {
        Some(e.kind())
    } else if let Some(e) = e.downcast_ref::<rulka_inference::InferenceError>() {
        Some(e.kind())
    } else if let Some(e) = e.downcast_ref::<rulka_env::EnvError>() {
        Some(e.kind())
    } else if let Some(e) = e.downcast_ref::<rulka_demos::DemoError>() {
        Some(e.kind())
    } else if let Some(e) = e.downcast_ref::<rulka_inference::EvalError>() {
        Some(e.kind())
    } else if let Some(e) = e.downcast_ref::<rulka_report::ReportError>() {
        Some(e.kind())
    } else if let Some(e) = e.downcast_ref::<rulka_env::NpyError>() {
        Some(e.kind())
    } else if let Some(e) = e.downcast_ref::<rulka_env::ZoneError>() {
        Some(e.kind())
    } else if let Some(e) = e.downcast_ref::<rulka_env::LineRecordError>() {
        Some(e.kind())
    } else if let Some(e) = e.downcast_ref::<rulka_env::InputScriptError>() {
        Some(e.kind())
    } else if let Some(e) = e.downcast_ref::<rulka_collector::CollectorError>() {
        Some(e.kind())
    } else if let Some(e) = e.downcast_ref::<rulka_transport::TransportError>() {
        Some(e.kind())
    } else {
        e.downcast_ref::<rulka_shm::ShmError>().map(rulka_shm::ShmError::kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context as _;

    #[test]
    fn the_first_rulka_error_in_the_chain_decides_the_exit_code() {
        // Refused credentials, under two layers of context: the user's input.
        let auth = rulka_transport::TransportError::Auth {
            url: "nats://127.0.0.1:4222".into(),
            message: "authorization violation".into(),
        };
        let e = Err::<(), _>(auth).context("joining run r").context("collector 3").unwrap_err();
        assert_eq!(error_kind(&e), ErrorKind::BadInput);
        assert_eq!(error_kind(&e).exit_code(), 2);
        // Shared memory inside a transport error keeps shared memory's kind.
        let corrupt =
            rulka_shm::ShmError::Corrupt { path: "/dev/shm/x".into(), reason: "bad magic".into() };
        let e = anyhow::Error::from(rulka_transport::TransportError::Shm(corrupt));
        assert_eq!(error_kind(&e), ErrorKind::Corrupt);
        assert_eq!(error_kind(&e).exit_code(), 1);
        // Weights for another network, through the exporter: bad input.
        let arch = rulka_checkpoint::CheckpointError::Architecture {
            origin: "w.safetensors".into(),
            found: "aa".into(),
            expected: "bb".into(),
            architecture: "A".into(),
        };
        let e = anyhow::Error::from(rulka_export::ExportError::Checkpoint(arch));
        assert_eq!(error_kind(&e), ErrorKind::BadInput);
        // A config problem is bad input however it is wrapped; an outer
        // BadInput decides before an inner error of another kind.
        let cfg = rulka_config::Config::from_yaml_str("grpo: {group_size: 1}", "c.yaml");
        let e = anyhow::Error::from(cfg.unwrap_err()).context("loading the run");
        assert_eq!(error_kind(&e), ErrorKind::BadInput);
        let gone = rulka_transport::TransportError::PeerGone;
        let e = anyhow::Error::from(gone).context(BadInput("--resume: the run is gone".into()));
        assert_eq!(error_kind(&e), ErrorKind::BadInput);
        // Anything else: the job ran and failed.
        assert_eq!(error_kind(&anyhow::anyhow!("disk on fire")), ErrorKind::Failed);
        let gone = anyhow::Error::from(rulka_transport::TransportError::PeerGone);
        assert_eq!(error_kind(&gone), ErrorKind::Unavailable);
    }
}
