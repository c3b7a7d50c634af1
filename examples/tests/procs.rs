//! One process per GPU, the CPU part: the launchers' rank variables, and the rendezvous run as
//! real processes (the `rendezvous` example) over loopback TCP and through a file, with a fake
//! 128-byte id; a rank that does not show up is an error within the timeout.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[path = "../src/procs.rs"]
mod procs;

use procs::{LAUNCHERS, Rank, RankError, Rendezvous};

fn rank_of(vars: &[(&str, &str)]) -> Result<Rank, RankError> {
    let map: HashMap<String, String> =
        vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Rank::from_vars(|k| map.get(k).cloned())
}

#[test]
fn each_launchers_variables() {
    let r = |rank, world, local| Ok(Rank { rank, world, local });
    assert_eq!(rank_of(&[("RANK", "3"), ("WORLD_SIZE", "8"), ("LOCAL_RANK", "1")]), r(3, 8, 1));
    assert_eq!(
        rank_of(&[("SLURM_PROCID", "5"), ("SLURM_NTASKS", "6"), ("SLURM_LOCALID", "2")]),
        r(5, 6, 2)
    );
    assert_eq!(
        rank_of(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        ]),
        r(1, 2, 0)
    );
}

#[test]
fn launchers_in_order() {
    let slurm = [("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1"), ("SLURM_LOCALID", "0")];
    let ompi = [
        ("OMPI_COMM_WORLD_RANK", "2"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
    ];
    let torch = [("RANK", "1"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "1")];
    // mpirun in a Slurm allocation: the allocation's SLURM_* stay, Open MPI's name the rank.
    let both = [&slurm[..], &ompi[..]].concat();
    assert_eq!(rank_of(&both), Ok(Rank { rank: 2, world: 4, local: 0 }));
    let all = [&slurm[..], &ompi[..], &torch[..]].concat();
    assert_eq!(rank_of(&all), Ok(Rank { rank: 1, world: 2, local: 1 }));
    // A partial first set is an error, not a fall-through to the next launcher.
    let partial = [&slurm[..], &[("RANK", "0")][..]].concat();
    assert!(matches!(rank_of(&partial), Err(RankError::Partial { launcher: "torchrun", .. })));
}

#[test]
fn rank_errors_name_the_variables() {
    let e = |vars: &[(&str, &str)]| rank_of(vars).unwrap_err().to_string();
    assert_eq!(rank_of(&[]), Err(RankError::NotSet));
    assert!(e(&[]).contains("SLURM_PROCID"), "{}", e(&[]));
    assert_eq!(
        e(&[("SLURM_PROCID", "0"), ("SLURM_LOCALID", "0")]),
        "Slurm's variables are set only in part: SLURM_PROCID, SLURM_LOCALID set, SLURM_NTASKS not set"
    );
    assert_eq!(
        e(&[("RANK", "one"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")]),
        "RANK=\"one\" is not a number"
    );
    assert_eq!(
        e(&[("RANK", "0"), ("WORLD_SIZE", "-2"), ("LOCAL_RANK", "0")]),
        "WORLD_SIZE=\"-2\" is not a number"
    );
    assert_eq!(
        e(&[("RANK", "2"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")]),
        "RANK=2 is not less than WORLD_SIZE=2"
    );
    assert_eq!(
        e(&[
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "7"),
        ]),
        "OMPI_COMM_WORLD_LOCAL_RANK=7 is not less than OMPI_COMM_WORLD_SIZE=2"
    );
    assert_eq!(
        e(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "0"), ("SLURM_LOCALID", "0")]),
        "SLURM_NTASKS=0: a run has at least one rank"
    );
}

#[test]
fn rendezvous_arguments() {
    assert_eq!("file:/tmp/x".parse(), Ok(Rendezvous::File("/tmp/x".into())));
    assert_eq!("tcp:node1:29500".parse(), Ok(Rendezvous::Tcp("node1:29500".into())));
    assert_eq!("tcp:[::1]:29500".parse(), Ok(Rendezvous::Tcp("[::1]:29500".into())));
    for bad in ["", "file:", "tcp:node1", "tcp::29500", "tcp:node1:http", "udp:node1:1", "/tmp/x"] {
        let e = bad.parse::<Rendezvous>().unwrap_err();
        assert!(e.contains("expected file:PATH or tcp:HOST:PORT"), "{bad}: {e}");
    }
    assert_eq!(procs::seconds("2.5"), Ok(Duration::from_millis(2500)));
    assert!(procs::seconds("0").is_err() && procs::seconds("-1").is_err());
}

/// A fake 128-byte id, as hex.
fn fake_id() -> String {
    (0..128u32).map(|i| format!("{:02x}", (i * 37 + 11) % 256)).collect()
}

/// A fresh path under the temporary directory, for a test's files.
fn fresh(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("cudagraph-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

/// A loopback port free a moment ago, and a lock held while the test uses it: the port is
/// released before rank 0 binds it, so tests over TCP run one at a time, or one test's rank 0
/// could take the port another test's ranks were given (a rank 1 waiting for a missing rank 0
/// was reset by another test's rank 0 in CI).
fn free_tcp() -> (MutexGuard<'static, ()>, String) {
    static TCP: Mutex<()> = Mutex::new(());
    let guard = TCP.lock().unwrap_or_else(|e| e.into_inner());
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    (guard, format!("tcp:127.0.0.1:{}", l.local_addr().expect("its address").port()))
}

/// Runs ranks `ranks` of a world of `world` as processes of the `rendezvous` example, all at
/// once, and waits for them: their outputs and the time the slowest took.
fn run(ranks: &[usize], world: usize, spec: &str, timeout: &str) -> (Vec<Output>, Duration) {
    let t = Instant::now();
    let children: Vec<_> = ranks
        .iter()
        .map(|&r| {
            let mut c = Command::new(env!("CARGO_BIN_EXE_rendezvous"));
            for (_, vars) in LAUNCHERS {
                for v in vars {
                    c.env_remove(v);
                }
            }
            c.env("RANK", r.to_string())
                .env("WORLD_SIZE", world.to_string())
                .env("LOCAL_RANK", r.to_string())
                .args(["--rendezvous", spec, "--rendezvous-timeout", timeout, "--id", &fake_id()])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("the rendezvous example")
        })
        .collect();
    let outputs = children.into_iter().map(|c| c.wait_with_output().expect("it ran")).collect();
    (outputs, t.elapsed())
}

fn text(o: &Output) -> String {
    format!(
        "status {}, stdout {:?}, stderr {:?}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn both_ranks_get_the_id(spec: &str) {
    let (out, _) = run(&[0, 1], 2, spec, "20");
    for (r, o) in out.iter().enumerate() {
        assert!(o.status.success(), "rank {r}: {}", text(o));
        let line = format!("rank {r} of 2 (local {r}): id {}\n", fake_id());
        assert_eq!(String::from_utf8_lossy(&o.stdout), line, "rank {r}");
    }
}

#[test]
fn two_processes_over_loopback_tcp() {
    let (_one_at_a_time, spec) = free_tcp();
    both_ranks_get_the_id(&spec);
}

#[test]
fn two_processes_through_a_file() {
    let dir = fresh("file");
    both_ranks_get_the_id(&format!("file:{}", dir.join("id").display()));
    let _ = std::fs::remove_dir_all(dir);
}

/// Ranks `ranks` of `world` fail within the 2 s timeout (plus start-up), each with an error
/// containing its entry of `says`.
fn missing(ranks: &[usize], world: usize, spec: &str, says: &[&str]) {
    let (out, took) = run(ranks, world, spec, "2");
    for (o, says) in out.iter().zip(says) {
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(says), "wanted {says:?}: {}", text(o));
        assert!(err.contains("gave up"), "{}", text(o));
    }
    assert!(took < Duration::from_secs(8), "took {took:?}");
}

#[test]
fn a_missing_rank_over_tcp() {
    let (_one_at_a_time, spec) = free_tcp();
    let addr = &spec["tcp:".len()..];
    let waits = format!("rank 2 to connect to {addr}");
    missing(&[0, 1], 3, &spec, &[&waits, &format!("rank 0 gave up waiting for {waits}")]);
}

#[test]
fn a_missing_rank_0_over_tcp() {
    let (_one_at_a_time, spec) = free_tcp();
    missing(&[1], 2, &spec, &[&format!("rank 0 to listen on {}", &spec["tcp:".len()..])]);
}

#[test]
fn a_missing_rank_through_a_file() {
    let dir = fresh("missing");
    let id = dir.join("id");
    let waits = format!("rank 2 to read the id from {}", id.display());
    missing(&[0, 1], 3, &format!("file:{}", id.display()), &[&waits, &waits]);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_missing_rank_0_through_a_file() {
    let dir = fresh("missing0");
    let id = dir.join("id");
    let waits = format!("rank 0 to write the id to {}", id.display());
    missing(&[1], 2, &format!("file:{}", id.display()), &[&waits]);
    let _ = std::fs::remove_dir_all(dir);
}
