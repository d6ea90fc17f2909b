//! The `pullgated` binary: the daemon (`pullgate serve --config FILE` becomes it) and
//! `pullgate doctor`; it takes `pullgate`'s whole command line.
use clap::Parser;

fn main() {
    let cli = pullgate::cli::Cli::parse();
    std::process::exit(pullgate::cli::run(cli));
}
