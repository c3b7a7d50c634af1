#!/usr/bin/env bash
# Starts N local processes of BINARY, one per GPU, as torchrun would: RANK, WORLD_SIZE and
# LOCAL_RANK set, and `--rendezvous file:DIR/id` added to ARGS (a fresh temporary directory,
# removed at the end) unless ARGS already have a --rendezvous. Waits for all of them; when one
# fails, stops the others and exits with its status; 0 when all succeeded.
#
#   examples/launch_local.sh 2 target/release/heat_multi --procs --sizes 4096
#   examples/launch_local.sh 2 target/debug/rendezvous      # the CPU part alone, no GPU needed
#
# Several hosts: see docs/several-gpus.md (srun or mpirun start the same binary). Needs bash 5.1+.
set -u

usage() {
    echo "usage: $0 N BINARY [ARGS...]   (N processes, ranks 0 .. N-1)" >&2
    exit 2
}
[[ $# -ge 2 && $1 =~ ^[1-9][0-9]*$ ]] || usage
n=$1
binary=$2
shift 2
[[ -x $binary ]] || { echo "$0: $binary is not an executable file" >&2; exit 2; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/launch_local.XXXXXX") || exit 1
rendezvous=(--rendezvous "file:$dir/id")
for a in "$@"; do
    [[ $a == --rendezvous || $a == --rendezvous=* ]] && rendezvous=()
done

declare -A rank_of=()
stop() {
    for p in "${!rank_of[@]}"; do
        kill -TERM "$p" 2>/dev/null
    done
    wait
    rm -rf "$dir"
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM

for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r "$binary" "$@" "${rendezvous[@]}" &
    rank_of[$!]=$r
done

status=0
while ((${#rank_of[@]} > 0)); do
    wait -n -p done "${!rank_of[@]}"
    s=$?
    r=${rank_of[$done]}
    unset "rank_of[$done]"
    if ((s != 0)); then
        echo "$0: rank $r exited with status $s; stopping the other ranks" >&2
        status=$s
        break
    fi
done
stop
exit "$status"
