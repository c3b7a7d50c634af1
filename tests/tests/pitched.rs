//! 2-D (pitched) copies and memsets (`copy_2d`, `memset_2d`, `Rows`) on the GPU, graph vs eager
//! vs a host model, exact (integers), with odd widths and pitches, device↔device and through
//! pinned host memory, and the builder.
//!
//! Written without a GPU at hand: these tests were compiled but NOT yet run on a GPU.

mod common;

use common::{Result, assert_same, gpu, host};
use cudagraph::cudarc::driver::LaunchConfig;
use cudagraph::{GraphCache, Rows, eager, graph};

/// The host model of `copy_2d` into `dst` (a copy of its old contents).
fn copy_model(src: &[u32], s: Rows, dst: &[u32], d: Rows) -> Vec<u32> {
    let mut out = dst.to_vec();
    for r in 0..s.height {
        out[r * d.pitch..r * d.pitch + s.width]
            .copy_from_slice(&src[r * s.pitch..r * s.pitch + s.width]);
    }
    out
}

fn memset_model(dst: &[u16], rows: Rows, value: u16) -> Vec<u16> {
    let mut out = dst.to_vec();
    for r in 0..rows.height {
        out[r * rows.pitch..r * rows.pitch + rows.width].fill(value);
    }
    out
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn odd_widths_and_pitches_match_eager_and_the_host_model() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let (sp, dp) = (37usize, 53usize);
    let (n_src, n_dst) = (sp * 29, dp * 29);
    let src_host = host::iota(n_src as u32, 7, 3);
    let src = s.clone_htod(&src_host)?;
    let mut dst = s.clone_htod(&vec![0xdead_beefu32; n_dst])?;
    let mut dst_eager = s.clone_htod(&vec![0xdead_beefu32; n_dst])?;
    let mut flags = s.clone_htod(&vec![9u16; 101 * 7])?;
    let mut flags_eager = s.clone_htod(&vec![9u16; 101 * 7])?;
    let mut back = unsafe { ctx.alloc_pinned_with_flags::<u32>(n_dst, 0) }?;
    let mut cache = GraphCache::new();
    for (call, (w, h)) in [(1usize, 1usize), (31, 29), (37, 13), (17, 28)].into_iter().enumerate() {
        let (sr, dr) = (Rows::new(w, h, sp), Rows::new(w, h, dp));
        let fr = Rows::new(w.min(99), h.min(7), 101);
        let v = 1000 + call as u16;
        graph!(&mut cache, &s, {
            copy_2d(&src, sr, &mut dst, dr);
            memset_2d(&mut flags, fr, v);
            copy(&dst, &mut back);
        })?;
        eager!(&s, {
            copy_2d(&src, sr, &mut dst_eager, dr);
            memset_2d(&mut flags_eager, fr, v);
        })?;
        let got = s.clone_dtoh(&dst)?;
        assert_same(&got, &s.clone_dtoh(&dst_eager)?, &format!("call {call}: graph vs eager"));
        assert_same(back.as_slice()?, &got, &format!("call {call}: copied back"));
        assert_same(&s.clone_dtoh(&flags)?, &s.clone_dtoh(&flags_eager)?, "memset_2d");
    }
    // The model of the last call (each call overwrote a sub-rectangle of the previous ones).
    let mut want = vec![0xdead_beefu32; n_dst];
    let mut fwant = vec![9u16; 101 * 7];
    for (call, (w, h)) in [(1usize, 1usize), (31, 29), (37, 13), (17, 28)].into_iter().enumerate() {
        want = copy_model(&src_host, Rows::new(w, h, sp), &want, Rows::new(w, h, dp));
        fwant = memset_model(&fwant, Rows::new(w.min(99), h.min(7), 101), 1000 + call as u16);
    }
    assert_same(&s.clone_dtoh(&dst)?, &want, "host model");
    assert_same(&s.clone_dtoh(&flags)?, &fwant, "host model of memset_2d");
    let st = cache.stats();
    assert_eq!(st.builds, 1, "shape changes are per-node updates: {st:?}");
    let _ = k;
    Ok(())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn pitched_host_to_device_and_builder_match_the_model() -> Result {
    let _serial = common::serial();
    let (ctx, s, k) = gpu()?;
    let (w, h, hp, dp) = (13usize, 9usize, 16usize, 21usize);
    let mut pinned = unsafe { ctx.alloc_pinned_with_flags::<u32>(hp * h, 0) }?;
    pinned.as_mut_slice()?.copy_from_slice(&host::iota((hp * h) as u32, 3, 1));
    let mut dst = s.alloc_zeros::<u32>(dp * h)?;
    let mut out = s.alloc_zeros::<u32>(dp * h)?;
    let mut cache = GraphCache::new();
    let mut g = cache.builder(&s);
    let (pr, dw, ow) = (g.read(&pinned), g.write(&mut dst), g.write(&mut out));
    g.copy_2d(pr, Rows::new(w, h, hp), dw, Rows::new(w, h, dp));
    g.kernel(
        k.affine((dp * h) as u32, 1, 0, dw.read(), ow)
            .launch(LaunchConfig::for_num_elems((dp * h) as u32)),
    );
    g.launch()?;
    let want = copy_model(
        &host::iota((hp * h) as u32, 3, 1),
        Rows::new(w, h, hp),
        &vec![0; dp * h],
        Rows::new(w, h, dp),
    );
    assert_same(&s.clone_dtoh(&dst)?, &want, "builder copy_2d");
    assert_same(&s.clone_dtoh(&out)?, &host::affine(&want, 1, 0), "after the kernel");
    Ok(())
}
