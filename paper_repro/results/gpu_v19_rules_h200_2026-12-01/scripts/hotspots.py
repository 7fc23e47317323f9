"""Aggregate an ncu source page (``ncu -i R --page source --print-source cuda,sass --csv``,
gzipped) by CUDA source line: stall samples and executed warp instructions.

    python3 hotspots.py REPORT.cusass.csv.gz [ROWS]
"""
import collections
import csv
import gzip
import sys


def aggregate(path):
    samples, instructions, source = collections.Counter(), collections.Counter(), {}
    where = (None, None)
    for r in csv.reader(gzip.open(path, "rt")):
        if not r or r[0] in ("Function Name", "Line No", "Kernel Name"):
            continue
        if r[0] == "File Path":
            where = (r[1].split("/")[-1], None)
        elif r[0] != "":
            where = (where[0], r[0])
            source[where] = r[1].strip()[:90]
        elif r[2].startswith("0x"):
            try:
                s, e = int(r[4]), int(r[7])
            except ValueError:
                continue
            samples[where] += s
            instructions[where] += e
    return samples, instructions, source


def main():
    samples, instructions, source = aggregate(sys.argv[1])
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    for title, c in (("stall samples", samples), ("warp instructions", instructions)):
        total = sum(c.values()) or 1
        print(f"== {title} by source line (total {total})")
        for k, v in c.most_common(rows):
            print(f"{v:9d} {100 * v / total:5.1f}% {k[0]}:{k[1]}  {source.get(k, '')}")


if __name__ == "__main__":
    main()
