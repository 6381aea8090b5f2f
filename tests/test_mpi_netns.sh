#!/bin/sh
# Two "hosts" on Open MPI's TCP transport: two Linux network namespaces
# joined by a veth pair (created here, removed on exit), one rank in each.
#   test_mpi_netns.sh MPIEXEC TUTTI SHARED_DIR
# mpirun runs in namespace A (address .1); it starts the daemon of "host"
# .2 through an rsh agent (written below) that enters namespace B with
# `ip netns exec` and a UTS namespace of its own (another hostname, so Open
# MPI treats it as another node: no shared-memory transport, its own
# session directory).  Only the TCP BTL is allowed, on the veth subnet
# only, for the MPI traffic and for the launcher's own (oob).  A fused
# generation with one member per host, and a model split by layers over
# the two hosts, must print exactly the single-process text, and the veth
# must have carried the answers; so must an MoE model whose routed experts
# are split over the two hosts (--split-experts).
# Needs root and iproute2 (`ip netns`); where they are missing the test is
# skipped (exit 77), except under CI (TUTTI_CI or CI set): there it fails.
set -u
MPIEXEC=$1 T=$2 S=$3
M=$S/models
cant() {
  if [ -n "${TUTTI_CI:-}${CI:-}" ]; then echo "FAIL test_mpi_netns cannot run under CI: $1"; exit 1; fi
  echo "SKIP test_mpi_netns: $1"; exit 77
}
[ "$(id -u)" -eq 0 ] || cant "needs root (ip netns add)"
command -v ip >/dev/null 2>&1 || cant "needs iproute2 (ip)"
command -v unshare >/dev/null 2>&1 || cant "needs unshare (util-linux)"
tag=$$
NA=tuttiA$tag NB=tuttiB$tag VA=tva$tag VB=tvb$tag
# a subnet of 10/8 of our own (two runs at once must not share one)
NET=10.$((100 + tag % 100)).$(((tag / 100) % 250))
A=$NET.1 B=$NET.2
W=$(mktemp -d)
cleanup() {
  ip netns del "$NA" 2>/dev/null; ip netns del "$NB" 2>/dev/null  # (the veth pair goes with them)
  rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
ip netns add "$NA" 2>"$W/ns.err" || cant "ip netns add failed: $(cat "$W/ns.err")"
ip netns add "$NB" && ip link add "$VA" type veth peer name "$VB" && ip link set "$VA" netns "$NA" &&
  ip link set "$VB" netns "$NB" && ip -n "$NA" addr add "$A/24" dev "$VA" && ip -n "$NB" addr add "$B/24" dev "$VB" &&
  ip -n "$NA" link set "$VA" up && ip -n "$NB" link set "$VB" up && ip -n "$NA" link set lo up &&
  ip -n "$NB" link set lo up || { echo "FAIL test_mpi_netns: cannot set up the veth pair"; exit 1; }

# Open MPI's rsh launcher calls: AGENT [ssh options] HOST COMMAND...
cat >"$W/agent.sh" <<AGENT
#!/bin/sh
while [ \$# -gt 0 ]; do case \$1 in -*) shift;; *) break;; esac; done
host=\$1; shift
[ "\$host" = "$B" ] || { echo "agent: unknown host \$host" >&2; exit 1; }
exec ip netns exec "$NB" unshare --uts sh -c "hostname tutti-netns-b; \$*"
AGENT
chmod +x "$W/agent.sh"

fail=0
rx() { ip -n "$NA" -s link show "$VA" | awk 'f { print $1; exit } /RX:/ { f = 1 }'; }
two_hosts() {
  timeout 120 ip netns exec "$NA" "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 --host "$A:1,$B:1" \
    --mca plm_rsh_agent "$W/agent.sh" --mca btl tcp,self --mca btl_tcp_if_include "$NET.0/24" \
    --mca oob_tcp_if_include "$NET.0/24" "$@"
}
# same NAME MIN_RX MPI_ARGS CMD...: one process vs one rank per namespace
# (with MPI_ARGS added)
same() {
  name=$1 min_rx=$2 mpi_args=$3; shift 3
  "$T" "$@" -t 1 >"$W/one.out" 2>"$W/one.err" || { echo "FAIL $name: single-process run failed"; cat "$W/one.err"; fail=1; return; }
  r0=$(rx)
  two_hosts sh -c 'echo "rank $OMPI_COMM_WORLD_RANK on $(hostname), $(ip -o -4 addr show scope global | awk "{ print \$4 }")" >&2;
    exec "$0" "$@"' "$T" "$@" -t 1 $mpi_args >"$W/two.out" 2>"$W/two.err"
  rc=$? r1=$(rx)
  if [ $rc -ne 0 ]; then echo "FAIL $name: mpirun exit $rc"; cat "$W/two.err"; fail=1; return; fi
  if ! grep -q "rank 1 on tutti-netns-b, $B/24" "$W/two.err" || ! grep -q "rank 0 on .*, $A/24" "$W/two.err"; then
    echo "FAIL $name: the ranks did not run in the two namespaces"; cat "$W/two.err"; fail=1; return
  fi
  if ! [ -s "$W/one.out" ] || ! cmp -s "$W/one.out" "$W/two.out"; then
    echo "FAIL $name: output differs from the single-process run"; diff "$W/one.out" "$W/two.out" | head; fail=1; return
  fi
  if [ $((r1 - r0)) -lt "$min_rx" ]; then
    echo "FAIL $name: the veth received $((r1 - r0)) bytes (expected at least $min_rx)"; fail=1; return
  fi
  echo "ok   $name: $(wc -c <"$W/one.out") bytes identical, $((r1 - r0)) bytes into $A over the veth; $(grep 'tutti: mpi: [0-9]* req\|tutti: mpi: split: [0-9]\|tutti: mpi: experts: [0-9]' "$W/two.err" | sed 's/tutti: mpi: //')"
}
# 40 tokens: 40 rows of 512 logits come back from host B
same "fused token generation, one member per host" $((40 * 512 * 4)) "--place 0,1" run -m "$M/stories260K.gguf" \
  -m "$M/stories260K-ft/stories260K-dreams.gguf" -p "Once upon" -n 40 --temp 0
same "fused byte generation, one member per host" 100000 "--place 0,1" run -m "$M/stories260K.gguf" \
  -m "$M/BabyLlama-tok361/babyllama-tok361.gguf" -p "The dog" -n 60 --temp 0.8 --seed 3
# 40 tokens of 64 activations each come back from host B
same "one model split by layers over the two hosts" $((40 * 64 * 4)) --split-layers generate -m "$M/stories260K.gguf" \
  -p "Once upon a time" -n 40 --temp 0
# routed experts split over the two hosts: each MoE layer's rows of host
# B's experts (32 floats each) go there and come back, about half of a
# token's 4 rows in each of the 2 MoE layers
XD=$(cd "$(dirname "$0")" && pwd)/data/moe
same "an MoE model's experts split over the two hosts" $((40 * 32 * 4)) --split-experts generate \
  -m "$XD/qwen2moe-b-Q8_0.gguf" -p "Once upon a time" -n 40 --temp 0 --ignore-eos
exit $fail
