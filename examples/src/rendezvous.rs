//! The CPU half of one process per GPU, without a GPU: takes its rank from the launcher's
//! environment, gets an id from rank 0 through the rendezvous, and prints it.
//!
//! ```text
//! examples/launch_local.sh 2 target/debug/rendezvous
//! rendezvous --rendezvous file:PATH|tcp:HOST:PORT [--rendezvous-timeout SECONDS] [--id HEX]
//! ```
//! Rank 0 shares `--id` (hex), or 128 bytes of its own making like an NCCL unique id; every rank
//! prints `rank R of W (local L): id HEX` once all ranks have shown up. A missing rank, a
//! missing rank 0 or a bad environment: the error on standard error, exit status 1. Used by the
//! examples' tests (two processes over loopback TCP and through a file) and to try
//! `launch_local.sh`, `srun` or `mpirun` on machines without a GPU.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser as _;

#[path = "procs.rs"]
mod procs;

#[derive(clap::Parser)]
#[command(name = "rendezvous")]
struct Args {
    /// Where rank 0 hands the id to the others: file:PATH (a fresh path on a file system every
    /// rank sees) or tcp:HOST:PORT (an address of rank 0's host, reachable from every rank).
    #[arg(long)]
    rendezvous: procs::Rendezvous,
    /// Seconds to wait for the other ranks before giving up with an error.
    #[arg(long, default_value = "60", value_parser = procs::seconds)]
    rendezvous_timeout: Duration,
    /// The id rank 0 shares, in hex (default: 128 bytes made from the time and process id).
    #[arg(long)]
    id: Option<String>,
}

/// 128 bytes that differ from run to run (a stand-in for `ncclGetUniqueId`; not random enough
/// for anything but this test).
fn made_up_id() -> Vec<u8> {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut x = t.as_nanos() as u64 ^ (u64::from(std::process::id()) << 32) | 1;
    (0..128)
        .map(|_| {
            // xorshift64
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("--id {s:?}: expected an even number of hex digits"));
    }
    Ok((0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect())
}

fn main() -> ExitCode {
    let a = Args::parse();
    let run = || -> Result<String, Box<dyn std::error::Error>> {
        let rank = procs::Rank::from_env()?;
        let id = a.rendezvous.share(
            rank,
            || a.id.as_deref().map_or_else(|| Ok(made_up_id()), unhex),
            a.rendezvous_timeout,
        )?;
        Ok(format!("rank {} of {} (local {}): id {}", rank.rank, rank.world, rank.local, hex(&id)))
    };
    match run() {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rendezvous: {e}");
            ExitCode::FAILURE
        }
    }
}
