#!/bin/sh
# Latency a remote member adds per step on loopback, with the oracle's real
# llama-server (Debian's llama.cpp in /opt/llamacpp-oracle; run as root):
# remote stories260K fused with local TinyStories-656K (byte alignment: the
# vocabularies differ), greedy, 100 bytes, once with the full distribution
# (top = n_vocab, the default) and once with top=64.  The member's summary
# line (stderr, at the end) gives per request: our wall time, the server's
# own compute (its "timings": prompt_ms + predicted_ms), the difference
# (HTTP, the server's JSON, ours) and the part spent in our code.  The same
# two runs then go against `tutti serve` (its llama-server /completion) as
# the remote server.
#   usage: sh bench/remote_latency.sh [build/tutti] [../shared]
set -eu
TUTTI=${1:-build/tutti}
SHARED=${2:-../shared}
ROOT=/opt/llamacpp-oracle
PORT=${PORT:-18977}
mkdir -p $ROOT/tmp/remote
cp "$SHARED/models/stories260K.gguf" $ROOT/tmp/remote/
# flash attention off, as the reference logits (oracle/dumplogits.c)
chroot $ROOT llama-server -m /tmp/remote/stories260K.gguf --port $PORT --host 127.0.0.1 -t 1 -fa off \
    >/tmp/remote_latency_server.log 2>&1 &
SRV=$!
TSRV=
trap 'kill $SRV $TSRV 2>/dev/null || true' EXIT INT TERM
i=0
until curl -sf http://127.0.0.1:$PORT/health >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -gt 100 ] && { echo "llama-server did not start" >&2; exit 1; }
    sleep 0.2
done
V="vocab=$SHARED/models/stories260K.gguf"
for opt in "" ";top=64"; do
    echo "== remote stories260K$opt + local TinyStories-656K"
    "$TUTTI" run -m "http://127.0.0.1:$PORT#stories260K;$V$opt" -m "$SHARED/models/TinyStories-656K-Q8_0.gguf" \
        -p "Once upon a time" -n 100 --temp 0 2>&1 >/dev/null | grep -E "member|alignment"
done
TPORT=$((PORT + 1))
"$TUTTI" serve -m "$SHARED/models/stories260K.gguf" --port $TPORT -t 1 >/tmp/remote_latency_tutti.log 2>&1 &
TSRV=$!
i=0
until curl -sf http://127.0.0.1:$TPORT/health >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -gt 100 ] && { echo "tutti serve did not start" >&2; exit 1; }
    sleep 0.2
done
for opt in "" ";top=64"; do
    echo "== remote stories260K$opt (tutti serve) + local TinyStories-656K"
    "$TUTTI" run -m "http://127.0.0.1:$TPORT#stories260K;$V$opt" -m "$SHARED/models/TinyStories-656K-Q8_0.gguf" \
        -p "Once upon a time" -n 100 --temp 0 2>&1 >/dev/null | grep -E "member|alignment"
done
echo "== local stories260K + local TinyStories-656K (for comparison)"
"$TUTTI" run -m "$SHARED/models/stories260K.gguf" -m "$SHARED/models/TinyStories-656K-Q8_0.gguf" \
    -p "Once upon a time" -n 100 --temp 0 2>&1 >/dev/null | grep -E "member|alignment"
