#!/bin/sh
# Installs what tutti needs to build and test (Debian packages, as root or via
# sudo), then configures and builds it in build/ (or $1).  Safe to re-run: it
# installs only what is missing and rebuilds only what changed.
set -e
BUILD=${1:-build}
# (dash exits on a failing `shift`, even with `|| true`: test first)
if [ $# -gt 0 ]; then shift; fi
PKGS="build-essential cmake pkg-config libpcre2-dev libcmocka-dev libcjson-dev libmicrohttpd-dev"
missing=""
for p in $PKGS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "bootstrap: installing$missing" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
cmake -S "$(dirname "$0")/.." -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
# build progress goes to stderr: stdout stays the generated text of the command that follows
cmake --build "$BUILD" -j"$(nproc)" >&2
