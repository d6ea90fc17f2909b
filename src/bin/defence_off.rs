//! `pullgate-defence-off`: the daemon built with the cargo feature `defence-off`, for the
//! suite's positive controls only (src/defence.rs). Never installed or released.
use clap::Parser;

fn main() {
    let off: Vec<&str> = pullgate::defence::turned_off().iter().map(|d| d.name()).collect();
    eprintln!("pullgate-defence-off: a test build; defences turned off (PULLGATE_DEFENCE_OFF): {}", off.join(","));
    let cli = pullgate::cli::Cli::parse();
    std::process::exit(pullgate::cli::run(cli));
}
