#!/bin/sh
# Reference prompt token ids for tests/test_cli.c (test_prompt_text_matches_llama_cpp),
# made with llama.cpp's own prompt handling: llama-completion --verbose-prompt
# (Debian llama.cpp 0.7.0, the oracle chroot).  Each output line is
#   NAME: id id id ...
# for the prompts below on stories260K (escapes on by default, -f drops one
# trailing newline, --no-escape keeps backslashes).  Run as root:
#   sh tests/data/cli/make_refs.sh > tests/data/cli/prompt_ids.txt
set -e
ORACLE=/opt/llamacpp-oracle
W=$ORACLE/tmp/cli
mkdir -p $W
cp ../shared/models/stories260K.gguf $W/ 2>/dev/null || cp /work/shared/models/stories260K.gguf $W/
printf 'Once\\nupon a \\x41 time\\t"x"\n' > $W/f1.txt
printf 'a b\n\n' > $W/f2.txt
ids() { # NAME ARGS...
  name=$1; shift
  chroot $ORACLE llama-completion -m /tmp/cli/stories260K.gguf --verbose-prompt -n 1 --temp 0 -no-cnv "$@" 2>&1 |
    awk -v name="$name" '/number of tokens in prompt/ {on=1; printf "%s:", name; next}
         on && / -> / {for (i = 1; i <= NF; i++) if ($i == "->") {printf " %s", $(i-1); break}}
         on && /sampler seed/ {on=0; print ""}'
}
ids p_escapes -p 'Tom\nsaw \x41\x4g \"x\" \q\\ \t|\x 1|\x2'
ids p_trailing_backslash -p 'end\'
ids p_no_escape --no-escape -p 'a\nb\x41'
ids f_escapes -f /tmp/cli/f1.txt
ids f_two_newlines -f /tmp/cli/f2.txt
