//! The binary's logic behind `src/main.rs`: parse the command line, load configuration,
//! build the runtime, run the command, and map the outcome to an exit code (0 clean, 1
//! unexpected, 2 usage, 3 not ready for `status --require-ready`, 4 refused by
//! `support-bundle`'s secret scan, 78 configuration (a refused official profile
//! included), 80-91 fatal categories).
//!
//! A module of the binary (`src/main.rs` keeps only the allocator and `main`), beside
//! the commands it runs (`cli`, `demo`, `doctor`, the simulator). It must not grow
//! decisions of its own: each command's work lives in its module.

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Cluster, Command, ConfigSource, LatchAction, Tool};
use crate::config::{Config, ConfigError, ConfigOrigin, OfflineConfig};

/// Any command's failure: every error of the crate names its cause in its own message.
type Failure = Box<dyn std::error::Error + Send + Sync>;

/// The binary's `main`: what `tunnelgate` does with its arguments.
pub(crate) fn main() -> ExitCode {
    // A stdio child's guard (`__stdio-guard`, docs/stdio.md, "Children die with the gateway"): before anything else.
    if let Some(code) = crate::downstream::stdio_guard::dispatch() {
        return code;
    }
    let cli = Cli::parse();
    // `run` loads its configuration before anything else: it says how to build the
    // runtime (`runtime.worker_threads`). Every other command keeps a thread per core.
    let (command, threads) = match cli.command {
        Command::Run(args) => {
            crate::cli::defer_signals();
            let source = args.source();
            match source.load_with_origin() {
                Ok((config, origin)) => {
                    let threads = config.runtime.worker_threads.get();
                    (Ready::Run(Box::new(config), source, origin), Some(threads))
                }
                Err(e) => return ExitCode::from(config_error(&e)),
            }
        }
        Command::Tool(tool) => (Ready::Tool(tool), None),
    };
    let mut builder = match threads {
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(n) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n);
            b
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            crate::stderr::line(format_args!("cannot start the async runtime: {e}"));
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(dispatch(command));
    // Do not wait for stray blocking tasks (a hung child reaper, a stuck DNS lookup).
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    ExitCode::from(code)
}

/// A command ready to run: `run` with its loaded configuration (and where from, for a
/// reload), or any other.
enum Ready {
    Run(Box<Config>, ConfigSource, ConfigOrigin),
    Tool(Tool),
}

async fn dispatch(command: Ready) -> u8 {
    let tool = match command {
        Ready::Run(config, source, origin) => {
            return finish(crate::cli::run(*config, source, origin).await.map_err(Into::into))
        }
        Ready::Tool(tool) => tool,
    };
    let result: Result<u8, Failure> = match tool {
        Tool::Check(args) => match Config::load_with_origin(args.config.as_deref(), &args.overrides()) {
            Ok((config, origin)) => {
                if let Some(warning) = crate::cli::ignored_selectors(&origin) {
                    crate::stderr::line(format_args!("warning: {warning}"));
                }
                println!("# configuration is valid; effective values (secrets masked):");
                if let Some((path, by)) = &origin.profile {
                    println!("# read from the official client's profile {} ({by})", path.display());
                }
                print!("{}", config.masked());
                Ok(0)
            }
            Err(e) => return config_error(&e),
        },
        Tool::Doctor(args) => {
            let config = load(args.config.config.as_deref(), &args.config.overrides());
            crate::cli::doctor(&args, config).await.map_err(Into::into)
        }
        Tool::Status(args) => crate::cli::status(&args).await.map_err(Into::into),
        // These four read only local files: their configuration needs no secret (offline).
        Tool::Latch(args) => {
            // With coordination.backend = "etcd" configured, the cluster-wide latch too.
            let (path, cluster) = match (&args.latch_file, offline(args.config.as_deref(), &Default::default())) {
                (Some(p), Ok(config)) => (p.clone(), Cluster::of(&config)),
                (Some(p), Err(_)) => (p.clone(), Cluster::None),
                (None, Ok(config)) => (config.strict().latch_file.clone(), Cluster::of(&config)),
                (None, Err(e)) => return config_error(&e),
            };
            match args.action {
                LatchAction::Show => crate::cli::latch_show(&path, &cluster).await.map_err(Into::into),
                LatchAction::Clear { yes } => crate::cli::latch_clear(&path, &cluster, yes).await.map_err(Into::into),
            }
        }
        Tool::Receipts(args) => {
            let path = match (&args.path, offline(args.config.as_deref(), &Default::default())) {
                (Some(p), _) => p.clone(),
                (None, Ok(config)) => config.receipts().path.clone(),
                (None, Err(e)) => return config_error(&e),
            };
            crate::cli::receipts(&path, &args).map_err(Into::into)
        }
        Tool::SupportBundle(args) => match offline(args.config.config.as_deref(), &args.config.overrides()) {
            Ok(config) => crate::cli::support_bundle(&args, config).await.map_err(Into::into),
            Err(e) => return config_error(&e),
        },
        Tool::Profile(args) => Ok(crate::cli::profile(&args)),
        Tool::Sim(args) => crate::cli::sim(args).await.map_err(Into::into),
        Tool::Demo(args) => crate::demo::run(args.keep_dir).await.map_err(Into::into),
    };
    finish(result)
}

fn finish(result: Result<u8, Failure>) -> u8 {
    match result {
        Ok(code) => code,
        Err(e) => {
            // Every error of the crate names its cause in its own message: no chain to print.
            crate::stderr::line(format_args!("{e}"));
            1
        }
    }
}

fn load(path: Option<&std::path::Path>, overrides: &crate::config::Overrides) -> Result<Config, ConfigError> {
    Config::load(path, overrides)
}

fn offline(path: Option<&std::path::Path>, overrides: &crate::config::Overrides) -> Result<OfflineConfig, ConfigError> {
    Config::load_offline(path, overrides)
}

fn config_error(e: &ConfigError) -> u8 {
    crate::stderr::line(format_args!("{e}"));
    78
}
