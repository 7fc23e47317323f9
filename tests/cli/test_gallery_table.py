#!/usr/bin/env python3
"""The committed gallery table regenerates from the committed gallery JSON (CPU only)."""
import os
import subprocess
import sys

root = sys.argv[1]
res = os.path.join(root, "paper_repro", "results")
for name in sorted(os.listdir(res)):
    if name.startswith("gallery_") and name.endswith(".json"):
        md = os.path.join(res, name[:-5] + ".md")
        out = subprocess.run([sys.executable, os.path.join(root, "paper_repro", "peers", "gallery.py"), "table",
                              os.path.join(res, name)], check=True, capture_output=True, text=True).stdout
        if out != open(md).read():
            sys.exit("gallery table: %s does not regenerate from %s" % (md, name))
        print("gallery table: %s regenerates from %s" % (os.path.basename(md), name))
