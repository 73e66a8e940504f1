#!/usr/bin/env python3
"""Plots of a recipe comparison (tools/compare-recipe.sh --out DIR).

Usage: recipe-plots.py DATA_DIR OUT_DIR

Reads the numbers compare-recipe.sh wrote (DATA_DIR/stages.tsv,
likelihoods.tsv, alignments.tsv) and writes, where there is data:
  stage-times.png   wall time per stage, Kaldi vs ours
  likelihoods.png   per-iteration likelihood of both runs, one panel per
                    training dir (accumulation; alignment where logged)
  alignments.png    per alignment dir, % of frames and of utterances identical
One line per picture on stdout: "FILE|TITLE". Exit 3 without matplotlib.
"""
import csv
import os
import sys


def read_tsv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


def stage_times(plt, rows, out):
    rows = [r for r in rows if num(r["kaldi_s"]) is not None or num(r["ours_s"]) is not None]
    if not rows:
        return None
    names = [r["stage"] for r in rows]
    k = [num(r["kaldi_s"]) or 0 for r in rows]
    o = [num(r["ours_s"]) or 0 for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.5))
    y = list(range(len(rows)))
    ax.barh([i - 0.2 for i in y], k, height=0.4, label="Kaldi", color="#888888")
    ax.barh([i + 0.2 for i in y], o, height=0.4, label="ours", color="#1f77b4")
    for i, (a, b) in enumerate(zip(k, o)):
        if a and b:
            ax.text(max(a, b), i, "  %.2fx" % (a / b), va="center", fontsize=8)
    ax.set_yticks(y)
    ax.set_yticklabels(names)
    ax.invert_yaxis()
    ax.set_xlabel("wall time (s)")
    ax.set_title("Wall time per stage (Kaldi / ours = speed-up)")
    ax.margins(x=0.2)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18 if len(rows) > 4 else -0.3), ncol=2,
              fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "stage-times.png"), dpi=100)
    plt.close(fig)
    return "stage-times.png|Wall time per stage, Kaldi vs ours"


def likelihoods(plt, MaxNLocator, rows, out):
    dirs = []
    for r in rows:
        if r["iter"] != "-" and r["dir"] not in dirs:
            dirs.append(r["dir"])
    if not dirs:
        return None
    n = len(dirs)
    cols = min(n, 2)
    nrows = (n + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(6 * cols, 3.2 * nrows), squeeze=False)
    for ax, d in zip([a for row in axes for a in row], dirs):
        for kind, style in (("acc", "-"), ("align", ":")):
            pts = [r for r in rows if r["dir"] == d and r["kind"] == kind and r["iter"] != "-"]
            if not pts:
                continue
            pts.sort(key=lambda r: int(r["iter"]))
            it = [int(r["iter"]) for r in pts]
            for side, mark, color in (("kaldi", "o", "#888888"), ("ours", "x", "#1f77b4")):
                v = [num(r[side]) for r in pts]
                xs = [i for i, y in zip(it, v) if y is not None]
                ys = [y for y in v if y is not None]
                if ys:
                    label = "%s %s" % ("Kaldi" if side == "kaldi" else "ours", kind)
                    ax.plot(xs, ys, style, marker=mark, color=color, label=label, markersize=5,
                            fillstyle="none" if side == "kaldi" else "full")
        ax.set_title(d)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("iteration")
        ax.set_ylabel("log-likelihood per frame")
        ax.legend(fontsize=7)
    for ax in [a for row in axes for a in row][n:]:
        ax.set_visible(False)
    fig.suptitle("Likelihood per iteration (solid: accumulation, dotted: alignment)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "likelihoods.png"), dpi=100)
    plt.close(fig)
    return "likelihoods.png|Per-iteration likelihood of both runs"


def alignments(plt, rows, out):
    rows = [r for r in rows if (num(r["frames"]) or 0) > 0]
    if not rows:
        return None
    names = [r["dir"] for r in rows]
    fr = [100.0 * num(r["frames_identical"]) / num(r["frames"]) for r in rows]
    ut = [100.0 * num(r["utterances_identical"]) / num(r["utterances"]) if num(r["utterances"]) else 0
          for r in rows]
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(rows) + 2), 3.6))
    x = list(range(len(rows)))
    ax.bar([i - 0.2 for i in x], fr, width=0.4, label="frames identical", color="#1f77b4")
    ax.bar([i + 0.2 for i in x], ut, width=0.4, label="utterances identical", color="#ff7f0e")
    for i, (a, b) in enumerate(zip(fr, ut)):
        ax.text(i - 0.2, a, "%.2f" % a, ha="center", va="bottom", fontsize=7)
        ax.text(i + 0.2, b, "%.2f" % b, ha="center", va="bottom", fontsize=7)
    lo = min(fr + ut)
    ax.set_ylim(max(0.0, lo - (100.0 - lo) * 0.5 - 1.0), 100.0 + max(0.5, (100.0 - lo) * 0.08))
    ax.set_xlim(-0.7, len(rows) - 0.3)
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=20)
    ax.set_ylabel("% identical to Kaldi's")
    ax.set_title("Alignment agreement per stage")
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "alignments.png"), dpi=100)
    plt.close(fig)
    return "alignments.png|Alignment agreement with Kaldi per stage"


def main():
    if len(sys.argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    data, out = sys.argv[1], sys.argv[2]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError as e:
        sys.stderr.write("recipe-plots.py: no matplotlib (%s)\n" % e)
        return 3
    made = [
        stage_times(plt, read_tsv(os.path.join(data, "stages.tsv")), out),
        likelihoods(plt, MaxNLocator, read_tsv(os.path.join(data, "likelihoods.tsv")), out),
        alignments(plt, read_tsv(os.path.join(data, "alignments.tsv")), out),
    ]
    for m in made:
        if m:
            print(m)
    return 0


if __name__ == "__main__":
    sys.exit(main())
