//! `fleetd member-relay`: runs inside an offline member's sandbox (network `none`), where the
//! only network is loopback. It listens where the member's URL points (`127.0.0.1:<port>`),
//! carries each connection to the gateway's member socket (bound into the sandbox
//! read-only), and runs the member's program as its child, exiting with the program's status.
//! It holds no credential and reads nothing: the member's own token crosses it, as over TCP.

use std::path::PathBuf;
use std::process::ExitCode;
use tokio::net::{TcpListener, UnixStream};

/// Runs the relay until the program exits.
pub async fn run(listen: String, to: PathBuf, program: Vec<String>) -> ExitCode {
    let Some((bin, args)) = program.split_first() else {
        eprintln!("fleetd member-relay: no program to run");
        return ExitCode::from(2);
    };
    let listener = match TcpListener::bind(&listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("fleetd member-relay: listening on {listen}: {e}");
            return ExitCode::from(126);
        }
    };
    // Ctrl-C in the member's pane is for the member: the relay handles (not ignores, which its
    // child would inherit) SIGINT and SIGQUIT, and outlives them.
    use tokio::signal::unix::{signal, SignalKind};
    let (mut int, mut quit) = match (signal(SignalKind::interrupt()), signal(SignalKind::quit())) {
        (Ok(i), Ok(q)) => (i, q),
        _ => {
            eprintln!("fleetd member-relay: cannot handle signals");
            return ExitCode::from(126);
        }
    };
    let mut child = match tokio::process::Command::new(bin).args(args).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("fleetd member-relay: starting {bin}: {e}");
            return ExitCode::from(127);
        }
    };
    loop {
        tokio::select! {
            biased;
            status = child.wait() => {
                return match status {
                    Ok(s) => {
                        use std::os::unix::process::ExitStatusExt;
                        let code = s.code().or_else(|| s.signal().map(|n| 128 + n)).unwrap_or(1);
                        ExitCode::from(u8::try_from(code).unwrap_or(1))
                    }
                    Err(_) => ExitCode::FAILURE,
                };
            }
            _ = int.recv() => {}
            _ = quit.recv() => {}
            accepted = listener.accept() => {
                let Ok((mut conn, _)) = accepted else { continue };
                let to = to.clone();
                tokio::spawn(async move {
                    match UnixStream::connect(&to).await {
                        Ok(mut up) => {
                            let _ = tokio::io::copy_bidirectional(&mut conn, &mut up).await;
                        }
                        Err(e) => eprintln!("fleetd member-relay: {}: {e}", to.display()),
                    }
                });
            }
        }
    }
}
