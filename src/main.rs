//! The `tunnelgate` binary: parse the command line, load configuration, run, and map
//! the outcome to an exit code (0 clean, 1 unexpected, 2 usage, 3 not ready for
//! `status --require-ready`, 4 refused by `support-bundle`'s secret scan, 78
//! configuration, 80-91 fatal categories).

use std::process::ExitCode;

use clap::Parser;
use tunnelgate::cli::{Cli, Cluster, Command, ConfigSource, LatchAction, Tool};
use tunnelgate::config::{Config, ConfigError, OfflineConfig};

/// mimalloc by default: on the measured machine the gateway spent less CPU per command
/// with it than with the system allocator (`dist` build; the figures are in
/// docs/PERFORMANCE.md). It is built with `no_thp`: it never madvises its heap into
/// transparent huge pages, which kept its resident memory near the system allocator's;
/// the process's THP setting, inherited by stdio children, is left alone.
/// `--no-default-features` builds with the system allocator.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // A stdio child's guard (`__stdio-guard`, docs/stdio.md, "Children die with the gateway"): before anything else.
    if let Some(code) = tunnelgate::downstream::stdio_guard::dispatch() {
        return code;
    }
    let cli = Cli::parse();
    // `run` loads its configuration before anything else: it says how to build the
    // runtime (`runtime.worker_threads`). Every other command keeps a thread per core.
    let (command, threads) = match cli.command {
        Command::Run(args) => {
            tunnelgate::cli::defer_signals();
            let source = args.source();
            match source.load() {
                Ok(config) => {
                    let threads = config.runtime.worker_threads.get();
                    (Ready::Run(Box::new(config), source), Some(threads))
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
            tunnelgate::stderr::line(format_args!("cannot start the async runtime: {e}"));
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
    Run(Box<Config>, ConfigSource),
    Tool(Tool),
}

async fn dispatch(command: Ready) -> u8 {
    let tool = match command {
        Ready::Run(config, source) => return finish(tunnelgate::cli::run(*config, source).await.map_err(Into::into)),
        Ready::Tool(tool) => tool,
    };
    let result: anyhow::Result<u8> = match tool {
        Tool::Check(args) => match load(args.config.as_deref(), &args.overrides()) {
            Ok(config) => {
                println!("# configuration is valid; effective values (secrets masked):");
                print!("{}", config.masked());
                Ok(0)
            }
            Err(e) => return config_error(&e),
        },
        Tool::Doctor(args) => {
            let config = load(args.config.config.as_deref(), &args.config.overrides());
            tunnelgate::cli::doctor(&args, config).await.map_err(Into::into)
        }
        Tool::Status(args) => tunnelgate::cli::status(&args).await.map_err(Into::into),
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
                LatchAction::Show => tunnelgate::cli::latch_show(&path, &cluster).await.map_err(Into::into),
                LatchAction::Clear { yes } => tunnelgate::cli::latch_clear(&path, &cluster, yes)
                    .await
                    .map_err(Into::into),
            }
        }
        Tool::Receipts(args) => {
            let path = match (&args.path, offline(args.config.as_deref(), &Default::default())) {
                (Some(p), _) => p.clone(),
                (None, Ok(config)) => config.receipts().path.clone(),
                (None, Err(e)) => return config_error(&e),
            };
            tunnelgate::cli::receipts(&path, &args).map_err(Into::into)
        }
        Tool::SupportBundle(args) => match offline(args.config.config.as_deref(), &args.config.overrides()) {
            Ok(config) => tunnelgate::cli::support_bundle(&args, config).await.map_err(Into::into),
            Err(e) => return config_error(&e),
        },
        Tool::Sim(args) => tunnelgate::cli::sim(args).await.map_err(Into::into),
        Tool::Demo(args) => tunnelgate::demo::run(args.keep_dir).await.map_err(Into::into),
    };
    finish(result)
}

fn finish(result: anyhow::Result<u8>) -> u8 {
    match result {
        Ok(code) => code,
        Err(e) => {
            // Every error of the crate names its cause in its own message: no chain to print.
            tunnelgate::stderr::line(format_args!("{e}"));
            1
        }
    }
}

fn load(path: Option<&std::path::Path>, overrides: &tunnelgate::config::Overrides) -> Result<Config, ConfigError> {
    Config::load(path, overrides)
}

fn offline(
    path: Option<&std::path::Path>,
    overrides: &tunnelgate::config::Overrides,
) -> Result<OfflineConfig, ConfigError> {
    Config::load_offline(path, overrides)
}

fn config_error(e: &ConfigError) -> u8 {
    tunnelgate::stderr::line(format_args!("{e}"));
    78
}
