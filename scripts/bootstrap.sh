#!/bin/sh
# Installs what tutti needs to build and test (Debian packages, as root or via
# sudo), then configures and builds it in build/ (or $1).  Safe to re-run: it
# installs only what is missing and rebuilds only what changed.
set -e
BUILD=${1:-build}
# (dash exits on a failing `shift`, even with `|| true`: test first)
if [ $# -gt 0 ]; then shift; fi
# libraries (PCRE2, cmocka, cJSON, libmicrohttpd, libyaml, libcurl, Nettle) and what the
# tests check against: Python's jinja2 and jsonschema, numpy (merge reference),
# curl (the HTTP server's tests; Node.js and npm come with the machine),
# chromium (the server page's browser test, driven by puppeteer-core from npm),
# clang-format (tests/check_layout.py checks the tree's format)
PKGS="build-essential cmake pkg-config libpcre2-dev libcmocka-dev libcjson-dev libmicrohttpd-dev libyaml-dev libcurl4-openssl-dev nettle-dev python3 python3-numpy python3-yaml python3-jsonschema python3-jinja2 curl openmpi-bin libopenmpi-dev iproute2 chromium clang-format"
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
# tests/test_serve.c drives `tutti serve` with the official openai npm
# package: installed from the committed lock file when it is missing or the
# lock file changed (Node.js and npm come with the machine)
SERVE_TESTS="$(dirname "$0")/../tests/serve"
if command -v npm >/dev/null && { [ ! -f "$SERVE_TESTS/node_modules/.lock-installed" ] ||
     ! cmp -s "$SERVE_TESTS/package-lock.json" "$SERVE_TESTS/node_modules/.lock-installed"; }; then
  echo "bootstrap: npm ci in tests/serve (openai client and puppeteer-core for the server tests)" >&2
  (cd "$SERVE_TESTS" && npm ci --no-audit --no-fund --prefer-offline >/dev/null &&
     cp package-lock.json node_modules/.lock-installed)
fi
cmake -S "$(dirname "$0")/.." -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
# build progress goes to stderr: stdout stays the generated text of the command that follows
cmake --build "$BUILD" -j"$(nproc)" >&2
