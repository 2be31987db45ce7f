#!/usr/bin/env python3
"""Writes a token set for the data benchmark: FILES llm.c GPT-2 token files
(magic 20240520, version 1, uint16) of TOKENS random ids below VOCAB (a power
of two up to 65536) each, named DIR/bench_train_000000.bin, ...; and one
validation file of a tenth as many tokens. Ids come from os.urandom, masked,
so writing is bound by the disk."""
import os
import struct
import sys


def write(path, tokens, vocab):
    header = struct.pack("<256i", 20240520, 1, tokens, *([0] * 253))
    with open(path, "wb") as f:
        f.write(header)
        left = tokens
        while left > 0:
            n = min(left, 1 << 24)
            raw = bytearray(os.urandom(2 * n))
            if vocab <= 256:
                raw[1::2] = bytes(n)  # little-endian: the high bytes
                raw[0::2] = bytes(b & (vocab - 1) for b in raw[0::2]) if vocab < 256 else raw[0::2]
            elif vocab < 65536:
                raw[1::2] = bytes(b & ((vocab >> 8) - 1) for b in raw[1::2])
            f.write(raw)
            left -= n


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: write_tokens.py DIR FILES TOKENS_PER_FILE VOCAB")
    out, files, tokens, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    if vocab < 2 or vocab > 65536 or vocab & (vocab - 1):
        sys.exit(f"VOCAB must be a power of two from 2 to 65536, not {vocab}")
    os.makedirs(out, exist_ok=True)
    for k in range(files):
        write(os.path.join(out, f"bench_train_{k:06d}.bin"), tokens, vocab)
    write(os.path.join(out, "bench_val_000000.bin"), max(tokens // 10, 4096), vocab)


if __name__ == "__main__":
    main()
