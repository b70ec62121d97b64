#!/usr/bin/env python3
"""Writes recall-task variants as TSV (source<TAB>target) for the long-range diagnosis
(docs/experiments.md): `--variant echo` gives the chars recall task with the queried key repeated in the
target ("a3c7?c" -> "c7"); `--variant pairs` gives each key-value pair as one whitespace token
("a3 c7 ? c" -> "7", what the built-in pair-recall task generates). Keys are distinct letters from the
first --symbols, values digits, the queried pair uniform over all n pairs.

  python3 bench/recall_tsv.py --variant pairs --lines 400000 --seed 1 > pairs.tsv
"""
import argparse, random

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("--variant", choices=["echo", "pairs"], required=True)
p.add_argument("--min-pairs", type=int, default=2)
p.add_argument("--max-pairs", type=int, default=16)
p.add_argument("--symbols", type=int, default=16)
p.add_argument("--lines", type=int, default=400000)
p.add_argument("--seed", type=int, default=1)
a = p.parse_args()
random.seed(a.seed)
letters = "abcdefghijklmnopqrstuvwxyz"[: a.symbols]
for _ in range(a.lines):
    n = random.randint(a.min_pairs, min(a.max_pairs, a.symbols))
    keys = random.sample(letters, n)
    values = [str(random.randrange(10)) for _ in keys]
    q = random.randrange(n)
    if a.variant == "echo":
        print("".join(k + v for k, v in zip(keys, values)) + "?" + keys[q] + "\t" + keys[q] + values[q])
    else:
        print(" ".join(k + v for k, v in zip(keys, values)) + " ? " + keys[q] + "\t" + values[q])
