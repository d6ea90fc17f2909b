//! cli: the command line (clap structs only; their `///` docs are the `--help` text) and the
//! dispatch from a subcommand to one library call, with exit codes.
use crate::config::Config;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Exit code for a bad command line or configuration.
pub const EXIT_USAGE: i32 = 2;
/// Exit code for any other failure.
pub const EXIT_FAILURE: i32 = 1;

/// pullgate: a containerd proxy snapshotter that refuses to unpack or run a cached private
/// image for a namespace or pod that has not itself authenticated to the registry.
#[derive(Debug, Parser)]
#[command(name = "pullgate", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: serve containerd's Snapshots service on the configured socket.
    Serve {
        /// Configuration file (see config.toml.example).
        #[arg(long, short = 'c', default_value = "/etc/pullgate/config.toml")]
        config: PathBuf,
    },
}

/// A bare level ("debug") applies to pullgate's own events; the libraries underneath (h2,
/// tonic) stay at warn. Anything else is a full EnvFilter directive.
fn log_filter(level: &str) -> String {
    match level {
        "error" | "warn" | "info" | "debug" | "trace" => format!("warn,pullgate={level}"),
        other => other.to_string(),
    }
}

fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(log_filter(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
}

/// Runs the parsed command; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    match cli.command {
        Command::Serve { config } => {
            let cfg = match Config::load(&config) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("pullgate: {e}");
                    return EXIT_USAGE;
                }
            };
            init_logging(&cfg.daemon.log_level);
            let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("pullgate: cannot start runtime: {e}");
                    return EXIT_FAILURE;
                }
            };
            match rt.block_on(crate::daemon::serve(cfg)) {
                Ok(()) => 0,
                Err(e) => {
                    tracing::error!(error = %e, "pullgate stopped");
                    eprintln!("pullgate: {e}");
                    EXIT_FAILURE
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_levels_scope_to_pullgate() {
        assert_eq!(log_filter("debug"), "warn,pullgate=debug");
        assert_eq!(log_filter("info,h2=trace"), "info,h2=trace");
    }
}
