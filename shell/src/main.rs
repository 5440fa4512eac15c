//! `fleetd`: the daemon binary.

use clap::{Parser, Subcommand};
use fleetd::config::{self, Config};
use fleetd::daemon;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// fleetd — one gateway per host: delivers tasks from MCP leads into agent panes (herdr), only
/// when the agent is ready, and carries replies and questions back, across hosts over AMQP.
#[derive(Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway: REST and MCP (at /mcp) on `gateway.listen`. With no [broker] section
    /// it is a single-host gateway needing no broker. Stops gracefully on SIGTERM/SIGINT.
    Run {
        /// The config file (TOML); `fleetd check-config --example` prints a commented one.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Create this gateway's ed25519 key pair: writes the secret (owner-only) and prints the
    /// public key, which every other gateway lists under [peers].
    Keygen {
        /// Where to write the secret key; refuses to overwrite an existing file.
        #[arg(long, short)]
        out: PathBuf,
    },
    /// Check a config file and explain every problem with the key it is about.
    CheckConfig {
        #[arg(long, short, required_unless_present = "example")]
        config: Option<PathBuf>,
        /// Print a commented example config instead.
        #[arg(long)]
        example: bool,
    },
    /// Print the OpenAPI 3.1 document of the REST face (what `GET /openapi.json` serves), for
    /// generating clients without a running gateway.
    Openapi,
    /// Talk to a running gateway: the roster, a member's status, send/poll/spawn/stop, the
    /// profiles, what is in flight, and a live tail. The token comes from $FLEETD_TOKEN.
    ///
    /// Exit status: 0 done (a send replied), 1 refused, 2 usage, 3 gateway unreachable,
    /// 4 denied (401/403), 5 not found, 6 a send ended without a reply, 7 the member asked a
    /// question (answer with `send <gid> <answer> --turn-id <turnId>`).
    Ctl(fleetd::ctl::Ctl),
    /// Print the broker objects (exchanges, queues, bindings, consumers) this gateway declares.
    Topology {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// (Run by fleetd inside an offline member's sandbox.) Listen on ADDR, carry each
    /// connection to the gateway's member socket, and run the member's program.
    #[command(hide = true)]
    MemberRelay {
        #[arg(long)]
        listen: String,
        #[arg(long)]
        to: PathBuf,
        #[arg(last = true, required = true)]
        program: Vec<String>,
    },
    /// (Run by an agent's own hooks, which fleetd installs in a member's config.) Report what
    /// the agent says of itself — a Claude Code hook's event on stdin, Codex's notify event as
    /// the last argument — to the member's own gateway (FLEET_MCP_URL, FLEET_MCP_TOKEN,
    /// FLEET_GID). Prints nothing on stdout; always exits 0.
    #[command(hide = true)]
    MemberReport {
        /// Whose words: claude-code or codex.
        #[arg(long)]
        agent: String,
        /// The file the member's reports are numbered in.
        #[arg(long)]
        seq: Option<PathBuf>,
        /// The event (Codex's notify passes it here; Claude Code's hooks on stdin).
        event: Option<String>,
    },
    /// (Run by fleetd inside a host-network member's sandbox.) Scope the member away from
    /// abstract Unix sockets and signals outside its sandbox (Landlock), then run its program.
    #[command(hide = true)]
    MemberScope {
        #[arg(last = true, required = true)]
        program: Vec<String>,
    },
}

fn load(path: &Path) -> Result<Config, ExitCode> {
    Config::load(path).map_err(|errors| {
        eprintln!("{}: {} problem(s):", path.display(), errors.len());
        for e in errors {
            eprintln!("  {e}");
        }
        ExitCode::from(2)
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { config } => run_daemon(&config),
        Command::MemberRelay {
            listen,
            to,
            program,
        } => match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt.block_on(fleetd::relay::run(listen, to, program)),
            Err(e) => {
                eprintln!("fleetd member-relay: starting the runtime: {e}");
                ExitCode::from(126)
            }
        },
        Command::MemberScope { program } => fleetd::scope::run(program),
        Command::MemberReport { agent, seq, event } => {
            fleetd::member_report::run(&agent, seq, event)
        }
        Command::Keygen { out } => match daemon::write_key(&out) {
            Ok((_, public)) => {
                eprintln!("wrote the secret key to {}", out.display());
                println!("{}", config::encode_key(&public));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("fleetd keygen: {e}");
                ExitCode::FAILURE
            }
        },
        Command::CheckConfig { config, example } => check_config(config, example),
        Command::Ctl(ctl) => fleetd::ctl::main(ctl),
        Command::Openapi => {
            match serde_json::to_string_pretty(&fleetd::rest::document(
                fleetd::rest::router().1,
                fleetd::faces::Limits::default(),
            )) {
                Ok(s) => {
                    println!("{s}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("fleetd openapi: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Topology { config } => {
            let cfg = match load(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            match daemon::topology(&cfg) {
                Ok(None) => {
                    println!("single-host: no [broker] section, nothing is declared");
                    ExitCode::SUCCESS
                }
                Ok(Some(t)) => {
                    match serde_json::to_string_pretty(&t) {
                        Ok(s) => println!("{s}"),
                        Err(e) => eprintln!("fleetd topology: {e}"),
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("fleetd topology: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// `fleetd run`: the daemon, on one thread, until a signal; then a bounded shutdown.
fn run_daemon(config: &Path) -> ExitCode {
    let cfg = match load(config) {
        Ok(c) => c,
        Err(code) => return code,
    };
    daemon::init_logging(&cfg.log);
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("fleetd: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let bound = std::time::Duration::from_millis(cfg.gateway.shutdown_timeout_ms);
    let local = tokio::task::LocalSet::new();
    let result = local.block_on(&rt, daemon::run(cfg, daemon::signals(), None));
    drop(local);
    // Tasks still running (a DNS lookup, a lingering connection) get a bound, not forever.
    rt.shutdown_timeout(bound);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("fleetd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `fleetd check-config`: the config read and checked as `run` would, or the example.
fn check_config(config: Option<PathBuf>, example: bool) -> ExitCode {
    if example {
        print!("{}", config::EXAMPLE);
        return ExitCode::SUCCESS;
    }
    let Some(path) = config else {
        return ExitCode::from(2);
    };
    match load(&path) {
        Ok(cfg) => {
            println!(
                "{}: ok — host {}, {} on {}, {} lead(s), {} profile(s)",
                path.display(),
                cfg.gateway.host,
                if cfg.broker.is_some() {
                    "cross-host"
                } else {
                    "single-host"
                },
                cfg.gateway.listen,
                cfg.leads.len(),
                cfg.profiles.len()
            );
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}
