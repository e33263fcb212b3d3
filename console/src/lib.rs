//! How rulka's programs talk to their user. rulka's libraries never print:
//! they emit [`tracing`] events (`info!` for what a user follows, `warn!`
//! for trouble they ride out, `debug!` for the curious); a program installs
//! [`init`] once, which prints them on stderr.
//!
//! By default only rulka's own events at `info` and above are printed, each
//! as its bare message — the lines users see (`[rulka train] …`). With `-v`
//! rulka's `debug` events and other crates' warnings are printed too, and
//! with `-vv` everything at `trace`, each line prefixed by its level and
//! target. `RUST_LOG` (e.g. `RUST_LOG=rulka_transport=debug,async_nats=info`)
//! replaces the default filter and also prefixes lines.
//!
//! ```
//! rulka_console::init(0);
//! tracing::info!("[rulka demo] printed on stderr as it is");
//! ```
//!
//! [`reference`] writes the command-line reference (docs/reference/cli.md)
//! from the binaries' own argument parsers.

pub mod reference;

use std::fmt;

use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// The crates whose events are rulka's.
const RULKA: &[&str] = &[
    "rulka",
    "rulka_checkpoint",
    "rulka_cli",
    "rulka_collector",
    "rulka_config",
    "rulka_env",
    "rulka_export",
    "rulka_inference",
    "rulka_learner",
    "rulka_run",
    "rulka_shm",
    "rulka_torch",
    "rulka_trainer",
    "rulka_transport",
];

/// The filter for `verbose` (`-v` count) when `RUST_LOG` is not set.
pub fn default_filter(verbose: u8) -> String {
    let (ours, others) = match verbose {
        0 => ("info", "off"),
        1 => ("debug", "warn"),
        _ => ("trace", "trace"),
    };
    let mut f = others.to_string();
    for c in RULKA {
        f.push_str(&format!(",{c}={ours}"));
    }
    f
}

/// Installs the program's subscriber (printing on stderr); a second call
/// does nothing. `verbose` is the number of `-v` flags.
pub fn init(verbose: u8) {
    let from_env = std::env::var("RUST_LOG").ok().filter(|s| !s.is_empty());
    let decorated = from_env.is_some() || verbose > 0;
    let filter = match from_env.as_deref().map(EnvFilter::try_new) {
        Some(Ok(f)) => f,
        Some(Err(e)) => {
            // A bad RUST_LOG must not silence the program.
            let _ = tracing_subscriber::fmt()
                .with_env_filter(EnvFilter::new(default_filter(verbose)))
                .event_format(Line { decorated: false })
                .with_writer(std::io::stderr)
                .try_init();
            tracing::warn!("[rulka] RUST_LOG ignored: {e}");
            return;
        }
        None => EnvFilter::new(default_filter(verbose)),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .event_format(Line { decorated })
        .with_writer(std::io::stderr)
        .try_init();
}

/// One event a line: its message (and fields), prefixed by level and
/// target when `decorated`.
#[derive(Debug, Clone, Copy)]
struct Line {
    decorated: bool,
}

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        if self.decorated {
            let m = event.metadata();
            write!(w, "{:>5} {}: ", m.level(), m.target())?;
        }
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_filter_is_rulka_at_info_and_parses() {
        let f = default_filter(0);
        assert!(f.starts_with("off,"), "{f}");
        assert!(f.contains(",rulka_trainer=info"), "{f}");
        assert!(default_filter(1).contains("rulka_collector=debug"));
        for v in 0..3 {
            assert!(EnvFilter::try_new(default_filter(v)).is_ok());
        }
    }
}
