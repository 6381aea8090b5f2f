#!/bin/sh
# The fuzz corpora, one file per harness: fuzz/corpus/NAME.tar (POSIX ustar:
# regular files only, names without folders, sorted, no owners and no
# times, so the same inputs give the same bytes), replayed in every build by
# tests/test_fuzz_regress.c.  A corpus whose pack would be larger than 2 MB
# (the repository's limit for a file outside models/ and tests/data/) stays
# a folder, fuzz/corpus/NAME/, which the test replays as well.
#
#   fuzz/corpus.sh unpack NAME DIR    NAME's inputs into DIR (a libFuzzer run's corpus)
#   fuzz/corpus.sh pack NAME DIR      fuzz/corpus/NAME.tar from the files of DIR (replaced)
#   fuzz/corpus.sh add NAME FILE...   FILE... added to (or replaced in) NAME's pack
set -eu
here=$(cd "$(dirname "$0")" && pwd)
limit=$((2 * 1024 * 1024))
usage() { sed -n '9,11p' "$0" | sed 's/^# *//' >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1 name=$2
shift 2
pack=$here/corpus/$name.tar

write_pack() { # DIR -> $pack
  tmp=$pack.tmp.$$
  (cd "$1" && find . -maxdepth 1 -type f -printf '%P\n' | LC_ALL=C sort) |
    tar --format=ustar --owner=0 --group=0 --numeric-owner --mtime=@0 --mode=0644 --no-recursion \
        -C "$1" -cf "$tmp" -T -
  size=$(stat -c %s "$tmp")
  if [ "$size" -gt "$limit" ]; then
    rm -f "$tmp"
    echo "corpus.sh: $name's pack would be $size bytes, over 2 MB: keep it as the folder fuzz/corpus/$name/" >&2
    exit 1
  fi
  mv "$tmp" "$pack"
  echo "fuzz/corpus/$name.tar: $(tar -tf "$pack" | wc -l) inputs, $size bytes"
}

case $cmd in
unpack)
  [ $# -eq 1 ] || usage
  mkdir -p "$1"
  tar -xf "$pack" -C "$1" ;;
pack)
  [ $# -eq 1 ] || usage
  write_pack "$1" ;;
add)
  [ $# -ge 1 ] || usage
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  [ ! -f "$pack" ] || tar -xf "$pack" -C "$work"
  cp "$@" "$work"/
  write_pack "$work" ;;
*) usage ;;
esac
