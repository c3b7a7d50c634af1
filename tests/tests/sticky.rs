//! A kernel that faults inside a graph (an illegal address) leaves the context unusable: the
//! driver answers every later call in it with the same sticky error. The next `graph!` call,
//! `eager!` call and `upload` must return `Error::ContextFault` naming their own call site, none
//! may hang, and dropping the cache and the buffers afterwards must neither panic nor abort.
//!
//! Its own test binary (one test): the fault poisons the context of the whole process, so no
//! other GPU test may share it.

use std::sync::mpsc;
use std::time::Duration;

use cudagraph::cudarc::driver::CudaContext;
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{Error, GraphCache, eager, graph, kernels};

/// The kernels of `kernels/fault.cu`.
const SOURCE: &str = include_str!("../kernels/fault.cu");

kernels! {
    /// `kernels/fault.cu`: `iota` computes, `poke` stores at a raw address (16: a fault).
    pub struct Fault {
        fn iota(n: u32, a: u32, b: u32, x: &mut [u32]);
        fn poke(addr: u64, v: u32);
    }
}

const N: u32 = 1000;
const CFG: (u32, u32) = (N.div_ceil(128), 128);
/// How long any one step may take before the test calls it a hang.
const HANG: Duration = Duration::from_secs(60);

/// What the test saw, sent from the worker thread so that the main thread can time it out.
#[derive(Debug)]
enum Seen {
    /// Step name, and the error (`Debug` and `Display`) or `None` when it succeeded.
    Step(&'static str, Option<String>),
    Done,
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_fault_in_a_graph_is_a_typed_context_error_at_the_next_call() {
    assert!(cudagraph::driver_available(), "this GPU test needs a CUDA driver; none was found");
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || run(tx));
    let mut seen = Vec::new();
    loop {
        match rx.recv_timeout(HANG) {
            Ok(Seen::Done) => break,
            Ok(Seen::Step(name, error)) => {
                eprintln!("{name}: {}", error.as_deref().unwrap_or("ok"));
                seen.push(name);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("a step hung for {HANG:?} after {seen:#?}")
            }
            // The worker panicked: its message is re-raised by `join` below.
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    if let Err(panic) = worker.join() {
        std::panic::resume_unwind(panic);
    }
}

fn run(tx: mpsc::Sender<Seen>) {
    let step = |name, r: Option<String>| tx.send(Seen::Step(name, r)).unwrap();
    let ctx = CudaContext::new(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    // SAFETY: the declarations match the kernels of fault.cu; `iota` stays within `n` elements;
    // `poke` writes where it is told, which is the fault this test wants.
    let k = unsafe { Fault::load(&ctx, compile_ptx(SOURCE).unwrap()) }.unwrap();
    let (mut x, mut y) =
        (stream.alloc_zeros::<u32>(N as usize).unwrap(), stream.alloc_zeros(N as usize).unwrap());
    let mut cache = GraphCache::new();

    // A healthy graph first, compared with the same launch made eagerly.
    graph!(&mut cache, &stream, {
        k.iota(N, 3, 1, &mut x).launch(CFG);
    })
    .unwrap();
    eager!(&stream, k.iota(N, 3, 1, &mut y).launch(CFG)).unwrap();
    let (gx, gy) = (stream.clone_dtoh(&x).unwrap(), stream.clone_dtoh(&y).unwrap());
    assert_eq!(gx, gy, "graph vs eager");
    assert_eq!(gx[999], 3 * 999 + 1);
    step("healthy graph matches eager", None);

    // The faulting variant (`if`): its launch is asynchronous, so it may itself succeed.
    let faulting = graph!(&mut cache, &stream, {
        k.iota(N, 3, 1, &mut x).launch(CFG);
        if true {
            k.poke(16, 1).launch((1u32, 1u32));
        }
    });
    step("faulting graph call", faulting.err().map(|e| format!("{e:?} / {e}")));
    let sync = stream.synchronize();
    step("synchronize after the fault", sync.err().map(|e| format!("{e:?}")));

    // The next graph call of the first variant: a typed error naming this call site.
    let start = line!();
    let next = graph!(&mut cache, &stream, {
        k.iota(N, 3, 1, &mut x).launch(CFG);
    });
    let end = line!();
    let e = next.expect_err("a call after a sticky fault must fail");
    step("next graph call", Some(format!("{e:?} / {e}")));
    match &e {
        Error::ContextFault { file, line, source } => {
            assert!(file.ends_with("sticky.rs"), "{e}");
            assert!((start..=end).contains(line), "line {line} not in {start}..={end}: {e}");
            assert_eq!(
                source.error.0,
                cudagraph::cudarc::driver::sys::CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
                "{e}"
            );
        }
        other => panic!("expected Error::ContextFault, got {other:?}"),
    }
    let msg = e.to_string();
    assert!(msg.contains("unusable after a kernel fault"), "{msg}");
    assert!(msg.contains("sticky.rs:"), "{msg}");

    // And the call after it, the eager path and upload: the same, never a hang or a panic.
    let again = graph!(&mut cache, &stream, {
        k.iota(N, 3, 1, &mut x).launch(CFG);
    });
    step("second call after the fault", again.as_ref().err().map(|e| format!("{e:?}")));
    assert!(matches!(again, Err(Error::ContextFault { .. })), "{again:?}");
    let eager = eager!(&stream, k.iota(N, 3, 1, &mut y).launch(CFG));
    step("eager! after the fault", eager.as_ref().err().map(|e| format!("{e:?}")));
    assert!(matches!(eager, Err(Error::ContextFault { .. })), "{eager:?}");
    let upload = cache.upload(&stream);
    step("upload after the fault", upload.as_ref().err().map(|e| format!("{e:?}")));
    assert!(matches!(upload, Err(Error::ContextFault { .. })), "{upload:?}");

    // Dropping everything: no panic, no abort (the destroys fail quietly).
    drop(cache);
    step("cache dropped", None);
    drop((x, y));
    step("buffers dropped", None);
    drop(k);
    drop(stream);
    drop(ctx);
    step("kernels, stream and context dropped", None);
    tx.send(Seen::Done).unwrap();
}
