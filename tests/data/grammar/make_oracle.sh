#!/bin/bash
# Greedy grammar-constrained generations of llama.cpp (the oracle chroot,
# Debian llama.cpp 0.7.0: llama-completion --temp 0 with --grammar-file, or
# --json-schema with llama.cpp's own schema converter) for
# test_grammar_gen.c.  *.schema.gbnf are tutti's conversions of
# *.schema.json, used here as plain grammars: they compare the matchers on
# the same grammar.  Writes oracle.tsv:
#   model <TAB> kind <TAB> file <TAB> n <TAB> status <TAB> output
# output with \n, \t, \\ escaped; status "ok", or "crash" when
# llama-completion died (SIGSEGV; 0.7.0 does with some grammars): the output
# is then only a prefix of its generation (maybe empty).
# Run as root from this folder:  bash make_oracle.sh
set -e
O=/opt/llamacpp-oracle
T=$O/tmp/grammar
M=../../../../shared/models
mkdir -p $T
cp $M/stories260K.gguf $M/TinyStories-656K-Q8_0.gguf *.gbnf *.schema.json $T/
out=oracle.tsv
: > $out
for model in stories260K.gguf TinyStories-656K-Q8_0.gguf; do
  for f in story.gbnf list.gbnf arith.gbnf quoted.gbnf person.schema.json story.schema.json \
           person.schema.gbnf story.schema.gbnf; do
    case $f in
      *.gbnf) kind=grammar; opt=--grammar-file; val=/tmp/grammar/$f ;;
      *) kind=schema; opt=--json-schema; val=$(tr -d '\n' < $f) ;;
    esac
    n=200
    # unbuffered: llama-completion 0.7.0 sometimes crashes at exit, which
    # would lose buffered output
    st=0
    chroot $O stdbuf -o0 llama-completion -m /tmp/grammar/$model -p "Once upon a time" $opt "$val" --temp 0 \
      -n $n --no-display-prompt -no-cnv --seed 1 > /tmp/oracle_out.txt 2>/dev/null || st=$?
    status=ok
    if [ $st -ne 0 ]; then status=crash; fi  # the output so far is a prefix
    # it ends its output with " [end of text]" and newlines of its own (none
    # of these grammars ends with a newline)
    txt=$(/usr/bin/python3 -c 'import sys; t=open("/tmp/oracle_out.txt").read().rstrip("\n"); t=t[:-len(" [end of text]")] if t.endswith(" [end of text]") else t; print(t.replace("\\","\\\\").replace("\n","\\n").replace("\t","\\t"))')
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$model" "$kind" "$f" "$n" "$status" "$txt" >> $out
  done
done
echo "wrote $out"
