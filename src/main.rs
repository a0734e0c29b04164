//! The `concert` binary: parse the configuration, start serving, stop cleanly on a signal.

use std::process::ExitCode;

use concert::config::{self, Loaded};

// musl's allocator is slow under threads; a fast allocator keeps the static build competitive.
#[global_allocator]
static GLOBAL: concert::sys::allocator::Allocator = concert::sys::allocator::Allocator;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `concert example …`, `concert reconcile …` and `concert client …` run instead of the server.
    if let Some(output) = concert::fastlane::commands::run(&args, &config::ProcessEnv, |request| {
        concert::fastlane::chains::BuiltIn::new().build(request)
    }) {
        return output.finish();
    }
    let config = match config::load(&args, &config::ProcessEnv) {
        Ok(Loaded::Run(config)) => *config,
        Ok(Loaded::Version) => {
            println!("concert {}", concert::VERSION);
            return ExitCode::SUCCESS;
        }
        Ok(Loaded::Help(usage)) => {
            println!("{usage}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("concert: {e}");
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1));
        }
    };
    let config_is_json = config.log_format == config::LogFormat::Json;
    concert::sys::logging::init(config_is_json);
    // The main thread's runtime is the first serving worker; `run` starts the others, each on
    // a current-thread runtime of its own (see `server::serve_workers`).
    let runtime = match concert::sys::runtime::worker_runtime().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("concert: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match concert::run_to_end(&runtime, config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the JSON log for log collectors, the plain line for a person.
            if config_is_json {
                tracing::error!("{e}");
            } else {
                eprintln!("concert: {e}");
            }
            ExitCode::FAILURE
        }
    }
}
