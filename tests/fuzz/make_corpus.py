#!/usr/bin/env python3
"""Regenerates the fuzz seed corpus in tests/fuzz/corpus/ from real files the project writes.

Usage: tests/fuzz/make_corpus.py [BUILD_DIR]   (default build; needs BUILD_DIR/tools/tapegrad)

Trains three tiny checkpoints (a Transformer on a built-in task with AdamW, an attention RNN with SGD,
and a Transformer on a small TSV file with whitespace tokens) and takes from them: both safetensors
files (safetensors), the model + optimizer pair in the checkpoint target's format (checkpoint, see
targets.hpp), the stored vocabularies (vocab). The TSV seeds are small files in the formats
read_tsv accepts. Only needed when a file format changes; the corpus is committed.

Each checkpoint seed also comes as format 1 (written before files carried a checksum): the same pair
without the "tapegrad.crc32" entry. A mutation of a checksummed seed is refused by the checksum
before any check behind it runs; the format-1 copies let the fuzzer reach those checks.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SEP = b"\n@@tapegrad-fuzz-part@@\n"  # kCheckpointSeparator in targets.hpp

TSV_SEEDS = {
    "translate.tsv": "# greetings\nthe cat\tle chat\ngood morning\tbonjour\r\n\nthank you very much\tmerci beaucoup\n",
    "reverse.tsv": "abcd\tdcba\nhello\tolleh\nxy\tyx\n",
    "unicode.tsv": "\ufeffnaïve café\tnaive cafe\n日本語\tnihongo\nemoji 🙂\tsmile\n",
}


def split_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    return raw, raw[8:8 + n], raw[8 + n:]


def without_checksum(header):
    """The header as format 1: no checksum entry, the old format name."""
    h = json.loads(header)
    meta = h["__metadata__"]
    del meta["tapegrad.crc32"]
    meta["format"] = "tapegrad-checkpoint-1"
    return json.dumps(h, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def write(dirname, name, data):
    os.makedirs(dirname, exist_ok=True)
    with open(os.path.join(dirname, name), "wb") as f:
        f.write(data)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    exe = os.path.join(build, "tools", "tapegrad")
    corpus = os.path.join(HERE, "corpus")
    tmp = tempfile.mkdtemp(prefix="tapegrad-corpus-")
    tsv = os.path.join(tmp, "pairs.tsv")
    with open(tsv, "w", encoding="utf-8") as f:
        # Without the seed's comment line: read_tsv refuses a line with no tab.
        seed = "".join(l for l in TSV_SEEDS["translate.tsv"].splitlines(True) if not l.startswith("#"))
        f.write(seed + "a dog\tun chien\nthe house\tla maison\n")
    tiny = ["--steps", "2", "--layers", "1", "--batch-size", "4", "--log-every", "1", "--eval-every", "2",
            "--valid-size", "4", "--threads", "1"]
    runs = {
        "transformer-adamw": ["--model", "transformer", "--task", "reverse", "--min-len", "2", "--max-len", "5",
                              "--symbols", "4", "--d-model", "8", "--heads", "2", "--d-ff", "8"],
        "rnn-sgd": ["--model", "attention-rnn", "--task", "copy", "--min-len", "2", "--max-len", "4",
                    "--symbols", "3", "--d-model", "4", "--hidden", "4", "--rnn-cell", "lstm", "--optimizer", "sgd"],
        "tsv-whitespace": ["--model", "transformer", "--train", tsv, "--tokens", "whitespace", "--d-model", "4",
                           "--heads", "1", "--d-ff", "4", "--positional", "learned"],
    }
    for name in ("safetensors", "checkpoint", "vocab", "tsv"):
        shutil.rmtree(os.path.join(corpus, name), ignore_errors=True)
    for run, args in runs.items():
        out = os.path.join(tmp, run)
        subprocess.run([exe, "train", *tiny, *args, "--out", out], check=True, stdout=subprocess.DEVNULL)
        model, model_header, model_data = split_safetensors(os.path.join(out, "model.safetensors"))
        optim, optim_header, optim_data = split_safetensors(os.path.join(out, "optimizer.safetensors"))
        write(os.path.join(corpus, "safetensors"), run + "-model.safetensors", model)
        write(os.path.join(corpus, "safetensors"), run + "-optimizer.safetensors", optim)
        if run != "tsv-whitespace":  # its options name a TSV file that will not exist when replayed
            write(os.path.join(corpus, "checkpoint"), run, SEP.join([model_header, model_data, optim_header, optim_data]))
            write(os.path.join(corpus, "checkpoint"), run + "-format-1",
                  SEP.join([without_checksum(model_header), model_data, without_checksum(optim_header), optim_data]))
        vocab = json.loads(model_header)["__metadata__"]["vocab"]
        write(os.path.join(corpus, "vocab"), run + ".json", vocab.encode("utf-8"))
    for name, text in TSV_SEEDS.items():
        write(os.path.join(corpus, "tsv"), name, text.encode("utf-8"))
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
