import csv, gzip, sys, collections
fn = sys.argv[1]
rows = list(csv.reader(gzip.open(fn, 'rt')))
cur_file = None; cur_line = None; cur_src = None
agg = collections.Counter(); src = {}; ins = collections.Counter()
total = 0
for r in rows:
    if not r: continue
    if r[0] == 'File Path': cur_file = r[1].split('/')[-1]; continue
    if r[0] in ('Function Name', 'Line No', 'Kernel Name'): continue
    if r[0] != '':
        cur_line = r[0]; cur_src = r[1]; src[(cur_file, cur_line)] = r[1].strip()[:90]; continue
    if r[2].startswith('0x'):
        try: s = int(r[4]); e = int(r[7])
        except: continue
        agg[(cur_file, cur_line)] += s; ins[(cur_file, cur_line)] += e; total += s
print("total samples", total)
for k, v in agg.most_common(int(sys.argv[2]) if len(sys.argv) > 2 else 30):
    print(f"{v:7d} {100*v/total:5.1f}% ins={ins[k]:7d} {k[0]}:{k[1]}  {src.get(k,'')}")
