# Source this (bash) before building the examples' `candle` feature:
#
#   source examples/candle-env.sh && ../shared/gpu/pack.sh --features cudagraph-examples/candle
#   source examples/candle-env.sh && cargo build --release -p cudagraph-examples --features candle --bin candle_mlp
#
# candle's CUDA back end compiles its kernels with nvcc when it is built (candle-kernels, through
# cudaforge: PTX, plus a static library of its quantized/MoE kernels linked against cudart) and
# links the CUDA libraries (cudarc's `dynamic-linking`: libcuda, libnvrtc, libcublas, libcublasLt,
# libcurand, libcudart). This installs a CUDA 13.0 toolchain from the Python package index into a
# virtual environment OUTSIDE the repository (default: `.nvcc-venv` next to the checkout; set
# CUDAGRAPH_NVCC_VENV to put it elsewhere), once, and exports what the builds read:
# - PATH (nvcc), CUDA_HOME / CUDA_PATH / CUDA_ROOT (cudaforge finds nvcc there, cudarc's build
#   script searches `$CUDA_ROOT/lib` and `lib/stubs` for the libraries to link);
# - CUDA_COMPUTE_CAP=90 (the H200: sm_90a; no GPU here for cudaforge to ask);
# - CUDARC_CUDA_VERSION unset: the workspace's `cuda-13000` feature names the version.
# CUDA 13.0 exactly, not newer: the GPU machine's driver is 580 (CUDA 13.0), which cannot load PTX
# of a newer nvcc. Every wheel is pinned, nvcc's `nvidia-nvvm` (cicc) too: left to pip it is the
# newest, whose PTX (`.version 9.5` from 13.5) nvcc 13.0's own ptxas refuses.
# The wheels hold the shared libraries with their versioned names only, and no driver: the
# script adds the unversioned links the linker wants (`libcublas.so` → `.so.13`) and a link-time
# stub `lib/stubs/libcuda.so` (soname `libcuda.so.1`, every `cu*` entry point of
# cudarc's bindings returning an error), as the CUDA toolkit's own `lib64/stubs` does, and one of
# NCCL (`libnccl.so`, soname `libnccl.so.2`), which only the linker sees. Nothing
# of this directory is used at run time: the binaries name `libcuda.so.1`, `libcublas.so.13`, …,
# which the GPU machine's driver and toolkit provide (`.devbin/run.sh` puts /usr/local/cuda/lib64
# on LD_LIBRARY_PATH).
#
# Downloads about 1 GB once (nvcc, the runtime headers and libraries, cuBLAS, cuRAND); the first
# build of candle's kernels then takes about 8 minutes on 2 cores, per profile (release, dev).

_cudagraph_candle_env() {
    local root venv py cuda cudarc
    root=$(git rev-parse --show-toplevel 2>/dev/null || pwd)
    venv=${CUDAGRAPH_NVCC_VENV:-$(cd "$root/.." && pwd)/.nvcc-venv}
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv" || return 1
    fi
    if [ ! -f "$venv/.cudagraph-cuda-13.0.88" ]; then
        "$venv/bin/pip" install --quiet \
            "nvidia-cuda-nvcc==13.0.88" \
            "nvidia-cuda-crt==13.0.88" \
            "nvidia-nvvm==13.0.88" \
            "nvidia-cuda-runtime==13.0.96" \
            "nvidia-cuda-cccl==13.0.85" \
            "nvidia-cuda-nvrtc==13.0.88" \
            "nvidia-cublas==13.0.2.14" \
            "nvidia-curand==10.4.0.35" || return 1
        touch "$venv/.cudagraph-cuda-13.0.88"
    fi
    py=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || return 1
    cuda="$py/nvidia/cu13"
    [ -x "$cuda/bin/nvcc" ] || { echo "candle-env.sh: no nvcc in $cuda/bin" >&2; return 1; }
    # Unversioned names for the linker (`-lcublas` looks for libcublas.so).
    local so base
    for so in "$cuda"/lib/lib*.so.*; do
        base=${so##*/}
        base=${base%%.so.*}.so
        case $base in libnvrtc-builtins*|*.alt.so) continue ;; esac
        [ -e "$cuda/lib/$base" ] || ln -s "${so##*/}" "$cuda/lib/$base"
    done
    # Link-time stubs of the driver and of NCCL (the tests' cudarc has its `nccl` feature; no
    # binary of the pack calls NCCL, so `--as-needed` drops it again), from cudarc's bindings
    # (the registry's copy of cudarc 0.19.10, fetched by cargo; `cargo fetch` first if absent).
    if [ ! -f "$cuda/lib/stubs/libcuda.so" ] || [ ! -f "$cuda/lib/stubs/libnccl.so" ]; then
        cudarc=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19.10 2>/dev/null | head -n 1)
        if [ -z "$cudarc" ]; then
            (cd "$root" && cargo fetch --quiet) || return 1
            cudarc=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19.10 | head -n 1)
        fi
        mkdir -p "$cuda/lib/stubs"
        local lib soname sys prefix
        for lib in cuda:libcuda.so.1:driver:cu nccl:libnccl.so.2:nccl:nccl; do
            IFS=: read -r lib soname sys prefix <<<"$lib"
            grep -oE "^pub unsafe fn $prefix[A-Za-z0-9_]+" "$cudarc/src/$sys/sys/mod.rs" \
                | sed 's/^pub unsafe fn \(.*\)$/int \1(void) { return 999; }/' \
                | sort -u >"$cuda/lib/stubs/${lib}_stub.c"
            cc -shared -fPIC -Wl,-soname,"$soname" -o "$cuda/lib/stubs/lib$lib.so" \
                "$cuda/lib/stubs/${lib}_stub.c" || return 1
        done
    fi
    export PATH="$cuda/bin:$PATH"
    export CUDA_HOME="$cuda" CUDA_PATH="$cuda" CUDA_ROOT="$cuda"
    export CUDA_COMPUTE_CAP=90
    unset CUDARC_CUDA_VERSION
    echo "candle-env.sh: nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') at $cuda, CUDA_COMPUTE_CAP=$CUDA_COMPUTE_CAP"
}
_cudagraph_candle_env
unset -f _cudagraph_candle_env
