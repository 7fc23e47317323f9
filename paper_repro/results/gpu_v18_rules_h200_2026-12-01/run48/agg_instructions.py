import csv, gzip, sys, collections
fn = sys.argv[1]
rows = list(csv.reader(gzip.open(fn, 'rt')))
cur_file = None; cur_line = None
ins = collect = collections.Counter(); src = {}; samp = collections.Counter()
tot = 0
for r in rows:
    if not r: continue
    if r[0] == 'File Path': cur_file = r[1].split('/')[-1]; continue
    if r[0] in ('Function Name', 'Line No', 'Kernel Name'): continue
    if r[0] != '':
        cur_line = r[0]; src[(cur_file, cur_line)] = r[1].strip()[:80]; continue
    if r[2].startswith('0x'):
        try: e = int(r[7]); s = int(r[4])
        except: continue
        ins[(cur_file, cur_line)] += e; samp[(cur_file, cur_line)] += s; tot += e
print("total warp instructions", tot, "samples", sum(samp.values()))
byfile = collections.Counter()
for k, v in ins.items(): byfile[k[0]] += v
print(byfile.most_common())
for k, v in ins.most_common(int(sys.argv[2])):
    print(f"{v:8d} {100*v/tot:5.1f}% s={samp[k]:5d} {k[0]}:{k[1]}  {src.get(k,'')}")
