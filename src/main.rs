//! The `pullgate` binary: parse the command line, run it, exit with its code.
use clap::Parser;

fn main() {
    let cli = pullgate::cli::Cli::parse();
    std::process::exit(pullgate::cli::run(cli));
}
