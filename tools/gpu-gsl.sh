# Sourced by tools/gpu-check.sh and tools/gpu-ab.sh (with $ROOT and $BUILD set):
# GSL for stats/ and the audit, from the system if pkg-config finds it, else
# from the .deb files in .gpudeps/ (libgsl27, libgslcblas0, libgsl-dev; fetch
# them with `apt-get download`), unpacked into "$BUILD-deps", never into /.
# Sets GSL_NOTE and exports PKG_CONFIG_PATH, LD_LIBRARY_PATH, LIBRARY_PATH.
GSL_NOTE="system"
if [ -n "${FLS_FORCE_GSL_DEB:-}" ] || ! pkg-config --exists gsl 2>/dev/null; then
    GSL_NOTE="none (audit skipped)"
    if ls "$ROOT"/.gpudeps/*.deb >/dev/null 2>&1; then
        DEPS="$BUILD-deps"
        rm -rf "$DEPS" && mkdir -p "$DEPS"
        for f in "$ROOT"/.gpudeps/*.deb; do dpkg -x "$f" "$DEPS"; done
        PC=$(dirname "$(find "$DEPS" -name gsl.pc | head -1)")
        if [ -n "$PC" ] && [ -d "$PC" ]; then
            # Debian's gsl.pc spells /usr out everywhere: point every path into $DEPS
            sed -i -e "s|=/usr|=$DEPS/usr|g" -e "s|-I/usr/|-I$DEPS/usr/|g" -e "s|-L/usr/|-L$DEPS/usr/|g" "$PC/gsl.pc"
            LIBDIR=$(dirname "$(find "$DEPS" -name 'libgsl.so' | head -1)")
            export PKG_CONFIG_PATH="$PC${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
            export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            export LIBRARY_PATH="$LIBDIR${LIBRARY_PATH:+:$LIBRARY_PATH}"
            GSL_NOTE="carried .deb ($LIBDIR)"
        fi
    fi
fi
