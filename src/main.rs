//! The `pullgate` binary: parse the command line, run a client command, exit with its code;
//! `serve` and `doctor` become `pullgated` (src/bin/pullgated.rs), installed beside it.
use clap::Parser;

fn main() {
    let cli = pullgate::cli::Cli::parse();
    std::process::exit(pullgate::cli::run_client_or_exec(cli));
}
