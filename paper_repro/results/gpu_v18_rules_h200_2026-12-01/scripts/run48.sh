#!/usr/bin/env bash
# device run 48: the SASS source pages (stall samples per instruction) of run 47's reports
NCU=/usr/local/cuda/bin/ncu
$NCU --version | tail -1
for n in list_rule_k50_p09_1 select_rule_wr4_64 select_rule_minp005_64; do
  $NCU -i build-scripts/$n.ncu-rep --page source --print-source sass --csv > $OUT/$n.sass.csv 2>&1; echo "$n sass rc=$? $(wc -l < $OUT/$n.sass.csv)"
  $NCU -i build-scripts/$n.ncu-rep --page source --print-source cuda,sass --csv > $OUT/$n.cusass.csv 2>&1; echo "$n cuda,sass rc=$? $(wc -l < $OUT/$n.cusass.csv)"
  head -3 $OUT/$n.sass.csv | cut -c1-600
done
gzip $OUT/*.csv
