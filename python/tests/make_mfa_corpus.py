#!/usr/bin/env python3
"""Makes a small corpus that the Montreal Forced Aligner can train and align
on, from the shared recipe corpus (which has features but no audio): the
transcripts of data/train/text are spoken again with espeak-ng in the voice
each speaker name encodes (speaker en-gb-x-rp-m3 -> voice en-gb-x-rp+m3,
the voices the recipe was made with), resampled by sox to 16 kHz mono
16-bit.

Output (DEST):
  corpus/SPEAKER/UTT.wav, corpus/SPEAKER/UTT.lab   MFA's corpus layout
  dictionary.txt    word<TAB>phones for every word used, from data/lexicon.txt
  phones.map        recipe phone -> MFA phone name (MFA splits a phone name at
                    its last "_" and wants no punctuation: '@' -> 'xa', ...)
  kaldi/{wav.scp,text,utt2spk,spk2utt}  the same utterances as a Kaldi data dir

Usage:
  make_mfa_corpus.py RECIPE_DIR DEST [--speakers 8] [--utts 6]
RECIPE_DIR is the unpacked synth-s5 directory (shared recipe unpack.sh).
Speakers are taken evenly spaced over the sorted training speakers (so the
accents vary), utterances are each speaker's first ones in sorted order.
Needs espeak-ng and sox (Debian: apt-get install espeak-ng sox).
Deterministic: the same arguments give the same files.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# MFA splits phone labels at their last "_" (position suffixes) and treats
# punctuation specially; letters and digits pass through
CHAR_CODES = {"@": "xa", ":": "xl", "#": "xh", ";": "xs", "?": "xq", "|": "xb",
              "!": "xe", "-": "xd", "_": "xu"}


def safe_phone(p):
    out = []
    for c in p:
        if c.isascii() and c.isalnum():
            out.append(c)
        elif c in CHAR_CODES:
            out.append(CHAR_CODES[c])
        else:
            raise SystemExit(f"make_mfa_corpus: no MFA name for phone {p!r} (character {c!r})")
    return "".join(out)


def read_table(path):
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.split(maxsplit=1)
            if parts:
                out[parts[0]] = parts[1].strip() if len(parts) > 1 else ""
    return out


def voice_of(speaker):
    # en-gb-x-rp-m3 -> en-gb-x-rp+m3
    base, variant = speaker.rsplit("-", 1)
    return f"{base}+{variant}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("recipe")
    ap.add_argument("dest")
    ap.add_argument("--speakers", type=int, default=8)
    ap.add_argument("--utts", type=int, default=6, help="utterances per speaker")
    args = ap.parse_args()
    for tool in ("espeak-ng", "sox"):
        if shutil.which(tool) is None:
            sys.exit(f"make_mfa_corpus: {tool} not found (Debian: apt-get install espeak-ng sox)")
    recipe, dest = Path(args.recipe), Path(args.dest)
    text = read_table(recipe / "data/train/text")
    utt2spk = read_table(recipe / "data/train/utt2spk")
    lexicon = {}
    with open(recipe / "data/lexicon.txt", encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if parts:
                lexicon.setdefault(parts[0], []).append(parts[1:])
    speakers = sorted(set(utt2spk.values()))
    if args.speakers < 1 or args.speakers > len(speakers):
        sys.exit(f"make_mfa_corpus: --speakers must be 1..{len(speakers)}")
    step = len(speakers) / args.speakers
    chosen = [speakers[int(i * step)] for i in range(args.speakers)]
    by_spk = {}
    for utt in sorted(text):
        by_spk.setdefault(utt2spk[utt], []).append(utt)
    utts = []
    for spk in chosen:
        ok = [u for u in by_spk[spk] if all(w in lexicon for w in text[u].split())]
        utts += [(spk, u) for u in ok[:args.utts]]

    phone_map = {}
    for prons in lexicon.values():
        for pron in prons:
            for p in pron:
                phone_map.setdefault(p, safe_phone(p))
    if len(set(phone_map.values())) != len(phone_map):
        sys.exit("make_mfa_corpus: phone names collide after mapping")

    (dest / "kaldi").mkdir(parents=True, exist_ok=True)
    words = set()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.wav"
        for spk, utt in utts:
            d = dest / "corpus" / spk
            d.mkdir(parents=True, exist_ok=True)
            wav = d / f"{utt}.wav"
            subprocess.run(["espeak-ng", "-v", voice_of(spk), "-w", str(raw), text[utt]],
                           check=True)
            # no dither (-D), repeatable (-R): the same bytes on every run
            subprocess.run(["sox", "-D", "-R", str(raw), "-r", "16000", "-c", "1", "-b", "16",
                            str(wav)], check=True)
            (d / f"{utt}.lab").write_text(text[utt] + "\n", encoding="utf-8")
            words.update(text[utt].split())
    with open(dest / "dictionary.txt", "w", encoding="utf-8") as f:
        for w in sorted(words):
            for pron in lexicon[w]:
                f.write(w + "\t" + " ".join(phone_map[p] for p in pron) + "\n")
    with open(dest / "phones.map", "w", encoding="utf-8") as f:
        for p in sorted(phone_map):
            f.write(f"{p} {phone_map[p]}\n")
    k = dest / "kaldi"
    with open(k / "wav.scp", "w") as ws, open(k / "text", "w") as tx, \
            open(k / "utt2spk", "w") as us:
        for spk, utt in sorted(utts, key=lambda x: x[1]):
            ws.write(f"{utt} {(dest / 'corpus' / spk / (utt + '.wav')).resolve()}\n")
            tx.write(f"{utt} {text[utt]}\n")
            us.write(f"{utt} {spk}\n")
    with open(k / "spk2utt", "w") as f:
        for spk in sorted(chosen):
            f.write(spk + " " + " ".join(sorted(u for s, u in utts if s == spk)) + "\n")
    print(f"make_mfa_corpus: {len(utts)} utterances of {len(chosen)} speakers, "
          f"{len(words)} words in {dest}")


if __name__ == "__main__":
    main()
