#!/bin/sh
# Packaging: `cmake --install` into a scratch prefix, then the README's example
# (examples/simple.c) is compiled against the installed header and libtutti.so
# with pkg-config alone, and run.  Its greedy text must be what `tutti generate
# --temp 0` writes for the same model and prompt, and the library must export
# no symbol that include/tutti.h does not declare.
# usage: test_package.sh SOURCE_DIR BUILD_DIR
set -eu
src=$1 build=$2
model=$src/models/stories260K.gguf
[ -f "$model" ] || { echo "test_package: $model is missing"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
libdir=$(ls -d "$tmp"/prefix/lib*/pkgconfig | head -n1)
export PKG_CONFIG_PATH="$libdir"
# every installed file is under the prefix (an install once wrote tutti.pc
# into a folder named "${CMAKE_INSTALL_PREFIX}" of the working directory)
outside=$(grep -v "^$tmp/prefix/" "$build/install_manifest.txt" || true)
[ -z "$outside" ] || { echo "test_package: installed outside the prefix: $outside"; exit 1; }
# tutti.pc is relocatable and asks for nothing but libtutti: the header
# includes no other library's, and libtutti.so carries its own dependencies
[ "$(cd "$tmp/prefix" && pwd -P)" = "$(cd "$(pkg-config --variable=prefix tutti)" && pwd -P)" ] ||
  { echo "test_package: tutti.pc's prefix $(pkg-config --variable=prefix tutti) is not the install's"; exit 1; }
libs=$(pkg-config --libs tutti | sed "s/ *$//")
case "$libs" in "-L$tmp/prefix/"*" -ltutti") ;; *) echo "test_package: pkg-config --libs tutti: $libs"; exit 1 ;; esac
[ -z "$(pkg-config --print-requires tutti; pkg-config --print-requires-private tutti)" ] ||
  { echo "test_package: tutti.pc requires other packages"; exit 1; }
# the CLI runs on the installed libtutti.so (not a copy linked into it)
ldd "$tmp/prefix/bin/tutti" | grep -q "=> $tmp/prefix/.*libtutti.so" ||
  { echo "test_package: the installed tutti does not use the installed libtutti.so:"; ldd "$tmp/prefix/bin/tutti"; exit 1; }
cc -Wall -Werror -o "$tmp/simple" "$src/examples/simple.c" $(pkg-config --cflags --libs tutti)
got=$(LD_LIBRARY_PATH="$(dirname "$libdir")" "$tmp/simple" "$model" "Once upon a time")
want=$("$tmp/prefix/bin/tutti" generate -m "$model" -p "Once upon a time" -n 32 --temp 0 2>/dev/null)
[ -n "$got" ] || { echo "test_package: the example printed nothing"; exit 1; }
if [ "$got" != "$want" ] && [ " $got" != "$want" ] && [ "$got" != " $want" ]; then
  printf 'test_package: example and tutti generate differ:\n  example:  %s\n  generate: %s\n' "$got" "$want"
  exit 1
fi
# exported symbols == declared functions
nm -D --defined-only "$(dirname "$libdir")"/libtutti.so | awk '$2 == "T" {sub(/@.*/, "", $3); print $3}' | sort >"$tmp/exported"
extra=$(for s in $(cat "$tmp/exported"); do grep -q "[ *]$s(" "$src/include/tutti.h" || echo "$s"; done)
[ -z "$extra" ] || { echo "test_package: libtutti.so exports undeclared symbols: $extra"; exit 1; }
[ -s "$tmp/exported" ] || { echo "test_package: libtutti.so exports nothing"; exit 1; }
echo "1 passed, 0 failed"
