//! One process per GPU: the rank from the launcher's environment and an opaque id (NCCL's unique
//! id, 128 bytes) shared by rank 0 with the others through a file or a TCP socket. CPU only: no
//! CUDA, no NCCL. Included with `#[path]` by `heat_multi`, `rendezvous` and the examples' tests.
//!
//! The rendezvous is also a barrier: it returns on a rank only once every rank of the world has
//! shown up, and a rank that does not show up within the timeout gives every waiting rank an
//! error naming it (instead of a hang in NCCL's own initialization).

// Each includer uses its own part of the module.
#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The launchers' variables, in the order they are tried: `(rank, world size, local rank)`.
///
/// torchrun's (and many launchers') first; Open MPI's before Slurm's, since `mpirun` run inside
/// a Slurm allocation leaves the allocation's `SLURM_*` variables in every process (those of the
/// batch step or of Open MPI's daemons, not of the rank), while `OMPI_COMM_WORLD_*` are set by
/// `mpirun` for each rank only.
pub const LAUNCHERS: [(&str, [&str; 3]); 3] = [
    ("torchrun", ["RANK", "WORLD_SIZE", "LOCAL_RANK"]),
    ("Open MPI", ["OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"]),
    ("Slurm", ["SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"]),
];

/// This process's place among the processes of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rank {
    /// Its rank, `0 .. world`.
    pub rank: usize,
    /// The number of processes (ranks) of the run.
    pub world: usize,
    /// Its rank among the processes on its host: the GPU it takes.
    pub local: usize,
}

/// Why the launcher's variables give no rank.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RankError {
    #[error(
        "no launcher's rank variables are set (looked for RANK/WORLD_SIZE/LOCAL_RANK, \
         OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK and SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID); \
         start it with examples/launch_local.sh, torchrun, mpirun or srun"
    )]
    NotSet,
    #[error("{launcher}'s variables are set only in part: {set} set, {missing} not set")]
    Partial { launcher: &'static str, set: String, missing: String },
    #[error("{var}={value:?} is not a number")]
    NotNumber { var: &'static str, value: String },
    #[error("{world_var}=0: a run has at least one rank")]
    EmptyWorld { world_var: &'static str },
    #[error("{var}={value} is not less than {world_var}={world}")]
    OutOfWorld { var: &'static str, value: usize, world_var: &'static str, world: usize },
}

impl Rank {
    /// The rank from the process's environment (see [`Rank::from_vars`]).
    pub fn from_env() -> Result<Rank, RankError> {
        Rank::from_vars(|name| std::env::var(name).ok())
    }

    /// The rank from the variables `lookup` gives (`None`: not set), trying the launchers of
    /// [`LAUNCHERS`] in order: the first one with any of its three variables set is used, and
    /// must have all three, numbers, with `0 < world`, `rank < world` and `local < world`.
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Result<Rank, RankError> {
        for (launcher, vars) in LAUNCHERS {
            let values = vars.map(&lookup);
            if values.iter().all(Option::is_none) {
                continue;
            }
            if values.iter().any(Option::is_none) {
                let names = |set: bool| {
                    let names: Vec<_> =
                        vars.iter().zip(&values).filter(|(_, v)| v.is_some() == set).collect();
                    names.iter().map(|(n, _)| **n).collect::<Vec<_>>().join(", ")
                };
                return Err(RankError::Partial {
                    launcher,
                    set: names(true),
                    missing: names(false),
                });
            }
            let mut n = [0usize; 3];
            for (i, (var, value)) in vars.iter().zip(values).enumerate() {
                let value = value.expect("checked above");
                n[i] = value
                    .trim()
                    .parse()
                    .map_err(|_| RankError::NotNumber { var, value: value.clone() })?;
            }
            let [rank, world, local] = n;
            if world == 0 {
                return Err(RankError::EmptyWorld { world_var: vars[1] });
            }
            for (i, value) in [(0, rank), (2, local)] {
                if value >= world {
                    return Err(RankError::OutOfWorld {
                        var: vars[i],
                        value,
                        world_var: vars[1],
                        world,
                    });
                }
            }
            return Ok(Rank { rank, world, local });
        }
        Err(RankError::NotSet)
    }
}

/// Where rank 0 hands the id to the others: `file:PATH` or `tcp:HOST:PORT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rendezvous {
    /// A path every rank can read and write (a shared file system across hosts): rank 0 writes
    /// the id to it (a temporary file renamed, so no rank reads half an id), rank `k` writes
    /// `PATH.k` once it has read it. The path must not exist before the run: use a fresh one
    /// per run, and remove `PATH` and `PATH.*` after it.
    File(PathBuf),
    /// An address of rank 0's host, reachable from every rank (`HOST:PORT`): rank 0 listens on
    /// it, the others connect.
    Tcp(String),
}

impl std::str::FromStr for Rendezvous {
    type Err = String;

    fn from_str(s: &str) -> Result<Rendezvous, String> {
        let bad = || format!("{s:?}: expected file:PATH or tcp:HOST:PORT");
        if let Some(path) = s.strip_prefix("file:") {
            if path.is_empty() {
                return Err(bad());
            }
            Ok(Rendezvous::File(path.into()))
        } else if let Some(addr) = s.strip_prefix("tcp:") {
            let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
            if host.is_empty() || port.parse::<u16>().is_err() {
                return Err(bad());
            }
            Ok(Rendezvous::Tcp(addr.to_owned()))
        } else {
            Err(bad())
        }
    }
}

impl std::fmt::Display for Rendezvous {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rendezvous::File(p) => write!(f, "file:{}", p.display()),
            Rendezvous::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

/// Why a rendezvous failed.
#[derive(Debug, thiserror::Error)]
pub enum RendezvousError {
    #[error("{at}: gave up after {waited:.1?} waiting for {what}")]
    Timeout { at: String, waited: Duration, what: String },
    #[error("{at}: {what}: {source}")]
    Io { at: String, what: String, source: std::io::Error },
    #[error("{at}: {message}")]
    Other { at: String, message: String },
}

/// Magic bytes opening every message of the TCP rendezvous (name and protocol version 1).
const MAGIC: &[u8; 8] = b"cgrdv\0\0\x01";
/// The longest id or error message a TCP reply may carry, in bytes.
const MAX_REPLY: u32 = 1 << 16;
/// How often a rank looks again for a file or a connection.
const POLL: Duration = Duration::from_millis(10);

impl Rendezvous {
    /// Shares the id: rank 0 hands `id()` to every other rank, every rank returns it, once all
    /// `rank.world` ranks have shown up. `id` is called on rank 0 only. Each wait gives up after
    /// `timeout` (counted from this call) with an error naming what it waited for: on rank 0,
    /// the ranks that did not show up; on the others, rank 0 (or, through rank 0 or the files,
    /// the ranks that did not show up).
    pub fn share<E: std::fmt::Display>(
        &self,
        rank: Rank,
        id: impl FnOnce() -> Result<Vec<u8>, E>,
        timeout: Duration,
    ) -> Result<Vec<u8>, RendezvousError> {
        let deadline = Instant::now() + timeout;
        let at = format!("rendezvous {self} (rank {} of {})", rank.rank, rank.world);
        let made = if rank.rank == 0 {
            Some(id().map_err(|e| RendezvousError::Other {
                at: at.clone(),
                message: format!("making the id: {e}"),
            })?)
        } else {
            None
        };
        let w = Waiter { at, timeout, deadline };
        match self {
            Rendezvous::File(path) => w.file(path, rank, made),
            Rendezvous::Tcp(addr) => w.tcp(addr, rank, made),
        }
    }
}

/// One rank's rendezvous: where (for messages), and until when it waits.
struct Waiter {
    at: String,
    timeout: Duration,
    deadline: Instant,
}

impl Waiter {
    fn timeout(&self, what: impl Into<String>) -> RendezvousError {
        RendezvousError::Timeout { at: self.at.clone(), waited: self.timeout, what: what.into() }
    }

    fn io(&self, what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RendezvousError {
        let (at, what) = (self.at.clone(), what.into());
        move |source| RendezvousError::Io { at, what, source }
    }

    fn other(&self, message: impl Into<String>) -> RendezvousError {
        RendezvousError::Other { at: self.at.clone(), message: message.into() }
    }

    /// Time left before the deadline, at least 1 ms (a zero socket timeout means none).
    fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))
    }

    fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Writes `bytes` to `path` whole or not at all: a temporary file beside it, renamed.
    fn write_atomic(&self, path: &Path, bytes: &[u8]) -> Result<(), RendezvousError> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".tmp{}", std::process::id()));
        let tmp = PathBuf::from(tmp);
        std::fs::write(&tmp, bytes).map_err(self.io(format!("writing {}", tmp.display())))?;
        std::fs::rename(&tmp, path).map_err(self.io(format!(
            "renaming {} to {}",
            tmp.display(),
            path.display()
        )))
    }

    fn file(
        &self,
        path: &Path,
        rank: Rank,
        id: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, RendezvousError> {
        let ack = |k: usize| {
            let mut p = path.as_os_str().to_owned();
            p.push(format!(".{k}"));
            PathBuf::from(p)
        };
        let id = match id {
            Some(id) => {
                if path.exists() {
                    return Err(self.other(format!(
                        "{} exists already (left by an earlier run?): remove it and its {}.* \
                         files, or use a fresh path",
                        path.display(),
                        path.display()
                    )));
                }
                self.write_atomic(path, &id)?;
                id
            }
            None => {
                let id = loop {
                    match std::fs::read(path) {
                        Ok(id) => break id,
                        Err(e) if e.kind() == ErrorKind::NotFound => {}
                        Err(e) => return Err(self.io(format!("reading {}", path.display()))(e)),
                    }
                    if self.expired() {
                        return Err(
                            self.timeout(format!("rank 0 to write the id to {}", path.display()))
                        );
                    }
                    std::thread::sleep(POLL);
                };
                self.write_atomic(&ack(rank.rank), b"")?;
                id
            }
        };
        // The barrier: every other rank's acknowledgement.
        loop {
            let missing: Vec<usize> = (1..rank.world).filter(|&k| !ack(k).exists()).collect();
            if missing.is_empty() {
                return Ok(id);
            }
            if self.expired() {
                return Err(self.timeout(format!(
                    "{} to read the id from {} (each writes {}.RANK)",
                    ranks(&missing),
                    path.display(),
                    path.display()
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    fn tcp(&self, addr: &str, rank: Rank, id: Option<Vec<u8>>) -> Result<Vec<u8>, RendezvousError> {
        match id {
            Some(id) => self.serve(addr, rank, id),
            None => self.connect(addr, rank),
        }
    }

    /// Rank 0: accepts one connection from each other rank, then replies to all with the id
    /// (or, when one is missing at the deadline, with the error).
    fn serve(&self, addr: &str, rank: Rank, id: Vec<u8>) -> Result<Vec<u8>, RendezvousError> {
        let listener = TcpListener::bind(addr).map_err(
            self.io(format!("rank 0 listening on {addr} (it must be an address of rank 0's host)")),
        )?;
        listener.set_nonblocking(true).map_err(self.io("setting the listener non-blocking"))?;
        let mut conns: Vec<Option<TcpStream>> = (0..rank.world).map(|_| None).collect();
        // Err(None): ranks missing at the deadline; Err(Some(message)): a bad hello.
        let result: Result<(), Option<String>> = loop {
            let missing: Vec<usize> = (1..rank.world).filter(|&k| conns[k].is_none()).collect();
            if missing.is_empty() {
                break Ok(());
            }
            if self.expired() {
                break Err(None);
            }
            match listener.accept() {
                Ok((mut s, _)) => {
                    // Anything but a rank's hello (a port scanner, a rank of another run) is
                    // dropped.
                    if let Some((k, world)) = self.hello(&mut s) {
                        if world != rank.world {
                            break Err(Some(format!(
                                "rank {k} says the world has {world} ranks, rank 0 says {}",
                                rank.world
                            )));
                        }
                        if k == 0 || k >= rank.world || conns[k].is_some() {
                            break Err(Some(format!("two processes say they are rank {k}")));
                        }
                        conns[k] = Some(s);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
                Err(e) => return Err(self.io("accepting a connection")(e)),
            }
        };
        let missing: Vec<usize> = (1..rank.world).filter(|&k| conns[k].is_none()).collect();
        let why = match &result {
            Ok(()) => String::new(),
            Err(None) => format!("{} to connect to {addr}", ranks(&missing)),
            Err(Some(m)) => m.clone(),
        };
        let reply = |status: u8, body: &[u8]| {
            let mut m = MAGIC.to_vec();
            m.push(status);
            m.extend_from_slice(&(body.len() as u32).to_le_bytes());
            m.extend_from_slice(body);
            m
        };
        let message = match &result {
            Ok(()) => reply(0, &id),
            Err(None) => reply(1, format!("rank 0 gave up waiting for {why}").as_bytes()),
            Err(Some(_)) => reply(1, format!("rank 0: {why}").as_bytes()),
        };
        for (k, s) in conns.iter_mut().enumerate() {
            if let Some(s) = s {
                let sent = s.set_nonblocking(false).and_then(|()| {
                    s.set_write_timeout(Some(self.left().max(Duration::from_secs(1))))?;
                    s.write_all(&message)
                });
                if let (Err(e), Ok(())) = (sent, &result) {
                    return Err(self.io(format!("sending the id to rank {k}"))(e));
                }
            }
        }
        match result {
            Ok(()) => Ok(id),
            Err(None) => Err(self.timeout(why)),
            Err(Some(_)) => Err(self.other(why)),
        }
    }

    /// A rank's hello on a connection just accepted: `(rank, world)`, or `None` if it sent
    /// something else or nothing in time.
    fn hello(&self, s: &mut TcpStream) -> Option<(usize, usize)> {
        s.set_nonblocking(false).ok()?;
        s.set_read_timeout(Some(self.left().min(Duration::from_secs(1)))).ok()?;
        let mut m = [0u8; 16];
        s.read_exact(&mut m).ok()?;
        if &m[..8] != MAGIC {
            return None;
        }
        let n = |i: usize| u32::from_le_bytes(m[i..i + 4].try_into().expect("4 bytes")) as usize;
        Some((n(8), n(12)))
    }

    /// Rank k > 0: connects to rank 0 (again and again until it listens), says who it is, and
    /// reads the id.
    fn connect(&self, addr: &str, rank: Rank) -> Result<Vec<u8>, RendezvousError> {
        let mut s = 'connect: loop {
            let addrs = addr.to_socket_addrs().map_err(self.io(format!("resolving {addr}")))?;
            let mut last = None;
            for a in addrs {
                match TcpStream::connect_timeout(&a, self.left().min(Duration::from_secs(1))) {
                    // Linux lets a loopback connect to a port nobody listens on, from that
                    // same port as its ephemeral one, connect to itself (TCP simultaneous
                    // open); that is not rank 0: drop it and try again.
                    Ok(s) if s.local_addr().ok() == s.peer_addr().ok() => {}
                    Ok(s) => break 'connect s,
                    Err(e) => last = Some(e),
                }
            }
            if self.expired() {
                let last = last.map(|e| format!(" (last try: {e})")).unwrap_or_default();
                return Err(self.timeout(format!("rank 0 to listen on {addr}{last}")));
            }
            std::thread::sleep(POLL);
        };
        let mut hello = MAGIC.to_vec();
        hello.extend_from_slice(&(rank.rank as u32).to_le_bytes());
        hello.extend_from_slice(&(rank.world as u32).to_le_bytes());
        s.set_write_timeout(Some(self.left())).map_err(self.io("setting a write timeout"))?;
        s.write_all(&hello).map_err(self.io(format!("saying hello to rank 0 at {addr}")))?;
        // Rank 0 replies once every rank has connected, or at its own deadline, which may come
        // after this rank's (rank 0 may have started later): once connected, this rank waits
        // a little longer for rank 0's verdict (a missing rank is then named as rank 0 saw it),
        // and gives up on its own only if rank 0 says nothing.
        let mut head = [0u8; 13];
        let mut read = |buf: &mut [u8]| -> Result<(), RendezvousError> {
            let wait = self.left() + VERDICT_GRACE;
            s.set_read_timeout(Some(wait)).map_err(self.io("setting a read timeout"))?;
            s.read_exact(buf).map_err(|e| match e.kind() {
                ErrorKind::WouldBlock | ErrorKind::TimedOut => self.timeout(format!(
                    "rank 0 at {addr} to send the id (it waits for every rank to connect)"
                )),
                _ => self.io(format!("reading the id from rank 0 at {addr}"))(e),
            })
        };
        read(&mut head)?;
        let len = u32::from_le_bytes(head[9..13].try_into().expect("4 bytes"));
        if &head[..8] != MAGIC || head[8] > 1 || len > MAX_REPLY {
            return Err(self.other(format!("{addr} is not rank 0 of a rendezvous (a bad reply)")));
        }
        let mut body = vec![0u8; len as usize];
        read(&mut body)?;
        if head[8] == 1 {
            return Err(self.other(String::from_utf8_lossy(&body).into_owned()));
        }
        Ok(body)
    }
}

/// How much longer than its own timeout a connected rank waits for rank 0's reply: rank 0's
/// deadline counts from rank 0's start, which may come later than this rank's.
const VERDICT_GRACE: Duration = Duration::from_secs(2);

/// A `--rendezvous-timeout` argument: seconds, fractions allowed (`60`, `2.5`).
pub fn seconds(s: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .and_then(|x| Duration::try_from_secs_f64(x).ok())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{s:?}: expected a positive number of seconds"))
}

/// "rank 3", "ranks 1, 2 and 5".
fn ranks(ranks: &[usize]) -> String {
    let s: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
    match s.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("ranks {} and {last}", rest.join(", ")),
        _ => format!("rank {}", s.join("")),
    }
}
