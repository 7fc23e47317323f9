#!/bin/sh
# install_check.sh BUILD SRC — what a user without root does: `meson install`
# into a scratch DESTDIR, then build examples/quickstart.c against that copy
# with the flags pkg-config gives (--define-variable=prefix points it at the
# copy), and run it. Fails if the header, the library or flashsample.pc is not
# installed, or if the example does not build or run.
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
meson install -C "$build" --destdir "$tmp" --no-rebuild --quiet >/dev/null
pc=$(find "$tmp" -name flashsample.pc | head -n 1)
if [ -z "$pc" ]; then
    echo "FAIL: meson install wrote no flashsample.pc"
    exit 1
fi
prefix=$tmp$(meson introspect "$build" --buildoptions | python3 -c \
    'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
export PKG_CONFIG_PATH="$(dirname "$pc")"
cflags=$(pkg-config --define-variable=prefix="$prefix" --cflags flashsample)
libs=$(pkg-config --define-variable=prefix="$prefix" --libs flashsample)
libdir=$(pkg-config --define-variable=prefix="$prefix" --variable=libdir flashsample)
for h in flashsample.h flashsample_status.h; do
    [ -f "$(pkg-config --define-variable=prefix="$prefix" --variable=includedir flashsample)/$h" ] ||
        { echo "FAIL: $h not installed"; exit 1; }
done
cc -std=c11 -Wall -Wextra -Werror "$src/examples/quickstart.c" $cflags $libs -lm -o "$tmp/quickstart"
LD_LIBRARY_PATH="$libdir" "$tmp/quickstart" >"$tmp/out.txt"
grep -q "from logits:" "$tmp/out.txt" || { echo "FAIL: quickstart printed no tokens"; cat "$tmp/out.txt"; exit 1; }
echo "ok: installed into a DESTDIR, found by pkg-config ($pc), quickstart built against it and ran"
