//! The command-line reference (`docs/reference/cli.md`), made from the
//! binaries' own command definitions: every command and option with its
//! help, default and allowed values, so the page cannot drift from what
//! the parser accepts (a test compares the two).

use std::fmt::Write as _;

/// Markdown for `cmd` and every visible subcommand under it, each headed
/// `` ## `<path>` `` (e.g. `` ## `rulka sim serve` ``); `skip` names
/// top-level commands whose sections another binary writes (they stay in
/// the root's list); `with_root`: the root's own section too.
///
/// ```
/// let cmd = clap::Command::new("tool").about("A tool.").subcommand(
///     clap::Command::new("run").about("Runs it.").arg(clap::Arg::new("fast").long("fast").help("Faster.")),
/// );
/// let md = rulka_console::reference::markdown(&cmd, "tool", &[], true);
/// assert!(md.contains("## `tool run`") && md.contains("- `--fast FAST`: Faster."), "{md}");
/// ```
pub fn markdown(cmd: &clap::Command, path: &str, skip: &[&str], with_root: bool) -> String {
    // Built, the arguments know their value names and counts.
    let mut cmd = cmd.clone();
    cmd.build();
    let cmd = &cmd;
    let mut out = String::new();
    if with_root {
        section(cmd, path, skip, true, &mut out);
    } else {
        for s in visible(cmd, skip) {
            section(s, &format!("{path} {}", s.get_name()), &[], false, &mut out);
        }
    }
    out
}

fn visible<'a>(cmd: &'a clap::Command, skip: &[&str]) -> Vec<&'a clap::Command> {
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help" && !skip.contains(&s.get_name()))
        .collect()
}

/// A command's section; a global option is said at the root only.
fn section(cmd: &clap::Command, path: &str, skip: &[&str], root: bool, out: &mut String) {
    let shown = |a: &&clap::Arg| !hidden(a) && (root || !a.is_global_set());
    let listed: Vec<&clap::Command> = visible(cmd, &[]);
    let subs = visible(cmd, skip);
    let has_args = cmd.get_arguments().any(|a| shown(&a));
    // A group of commands (`rulka sim`) gets a heading and its list; a
    // command gets its help, usage and options.
    let _ = writeln!(out, "## `{path}`\n");
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{}\n", text(&about.to_string()));
    }
    if !listed.is_empty() && !has_args {
        for s in &listed {
            let _ = writeln!(
                out,
                "- [`{path} {}`](#{}): {}",
                s.get_name(),
                anchor(&format!("{path} {}", s.get_name())),
                first_line(s.get_about().map(|a| a.to_string()).unwrap_or_default().as_str())
            );
        }
        let _ = writeln!(out);
    } else {
        let mut c = cmd.clone().bin_name(path.to_string());
        let usage = c.render_usage().to_string();
        let usage = usage.trim_start_matches("Usage: ").trim();
        let _ = writeln!(out, "```text\n{usage}\n```\n");
        for a in cmd.get_arguments().filter(shown) {
            let _ = writeln!(out, "- {}", arg(a));
        }
        if has_args {
            let _ = writeln!(out);
        }
        for s in &listed {
            let _ = writeln!(
                out,
                "- [`{path} {}`](#{}): {}",
                s.get_name(),
                anchor(&format!("{path} {}", s.get_name())),
                first_line(s.get_about().map(|a| a.to_string()).unwrap_or_default().as_str())
            );
        }
        if !listed.is_empty() {
            let _ = writeln!(out);
        }
    }
    for s in subs {
        section(s, &format!("{path} {}", s.get_name()), &[], false, out);
    }
}

fn hidden(a: &clap::Arg) -> bool {
    a.is_hide_set() || matches!(a.get_id().as_str(), "help" | "version")
}

fn arg(a: &clap::Arg) -> String {
    let values = a
        .get_value_names()
        .map(|v| v.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| a.get_id().as_str().to_uppercase());
    let takes_value = a.get_num_args().is_some_and(|n| n.takes_values())
        && !matches!(a.get_action(), clap::ArgAction::SetTrue | clap::ArgAction::Count);
    let mut name = if a.is_positional() {
        format!("`{values}`")
    } else {
        let mut forms = Vec::new();
        if let Some(s) = a.get_short() {
            forms.push(format!("-{s}"));
        }
        if let Some(l) = a.get_long() {
            forms.push(format!("--{l}"));
        }
        let v = if takes_value { format!(" {values}") } else { String::new() };
        format!("`{}{v}`", forms.join(", "))
    };
    if a.is_required_set() {
        name.push_str(" (required)");
    }
    let mut help =
        a.get_long_help().or(a.get_help()).map(|h| text(&h.to_string())).unwrap_or_default();
    if !help.is_empty() && !help.ends_with(['.', ')', '?', ':']) {
        help.push('.');
    }
    let mut line = format!("{name}: {help}");
    let possible: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|p| !p.is_hide_set())
        .map(|p| format!("`{}`", p.get_name()))
        .collect();
    if !possible.is_empty() && takes_value {
        let _ = write!(line, " One of {}.", possible.join(", "));
    }
    let defaults: Vec<String> =
        a.get_default_values().iter().map(|d| d.to_string_lossy().into_owned()).collect();
    if !defaults.is_empty() && takes_value {
        let _ = write!(line, " Default: `{}`.", defaults.join(","));
    }
    if a.is_global_set() {
        line.push_str(" Any command takes it.");
    }
    line
}

/// Help text as one paragraph (clap keeps the doc comments' line breaks).
fn text(s: &str) -> String {
    s.split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn first_line(s: &str) -> String {
    text(s).split(". ").next().unwrap_or("").trim_end_matches('.').to_string()
}

/// The anchor a heading `` `s` `` gets (GitHub's and mdBook's slug).
pub fn anchor(s: &str) -> String {
    s.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}
