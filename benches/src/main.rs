//! `report`: the project's main command. `cargo run --release -p benches -- --help`.

use std::process::ExitCode;

use benches::report::{self, Command};

fn main() -> ExitCode {
    let command = match report::parse_args(std::env::args().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("report: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = match command {
        Command::Help => {
            println!("{}", report::USAGE);
            return ExitCode::SUCCESS;
        }
        Command::Run(opts) => opts,
    };
    if cfg!(debug_assertions) {
        eprintln!("report: warning: a debug build; timings are meaningless (use --release)");
    }
    let stdout = std::io::stdout();
    match report::run(&opts, &mut stdout.lock()) {
        Ok(()) => ExitCode::SUCCESS,
        // `report | head` closes the pipe early: not an error worth a message.
        Err(e) if e.broken_pipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("report: error: {e}");
            ExitCode::FAILURE
        }
    }
}
