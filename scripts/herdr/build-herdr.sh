#!/usr/bin/env bash
# Build herdr v0.8.2 (commit 9eb521456ac0d19d3ab3d9d7cea3cca10baa8a4c, socket protocol 20)
# into $OUT/herdr, for local test runs only (HERDR_BIN). This script is ours; nothing of herdr
# (source, binary, build files) is kept in this repository.
#
# Preconditions (done once with the agent's `fetch` tool, which has no shell equivalent):
#   fetch github:herdrdev/herdr      -> /work/.mirror/herdrdev+herdr/repo
#   fetch github:jacobsandlund/uucode -> /work/.mirror/jacobsandlund+uucode/repo
#   fetch github:google/highway      -> /work/.mirror/google+highway/repo
# Also needs: pip (PyPI reachable), cargo/rustup with a stable 1.95 toolchain, crates.io reachable.
# No access to deps.files.ghostty.org / github.com is needed.
#
# Usage: ./build-herdr.sh            (BUILD=/tmp/herdr-build OUT=/tmp/herdr-bin by default)
#        BUILD=/tmp/x OUT=/tmp/x/bin ./build-herdr.sh
set -euo pipefail

BUILD=${BUILD:-/tmp/herdr-build}
OUT=${OUT:-/tmp/herdr-bin}
MIRROR=${MIRROR:-/work/.mirror}
HERDR_GIT=$MIRROR/herdrdev+herdr/repo
UUCODE_GIT=$MIRROR/jacobsandlund+uucode/repo
HIGHWAY_GIT=$MIRROR/google+highway/repo
TAG=v0.8.2
COMMIT=9eb521456ac0d19d3ab3d9d7cea3cca10baa8a4c
NICE="nice -n 19"

SRC=$BUILD/src
ZIGSYS=$BUILD/zigsys            # zig "--system" package dir: one sub-dir per package hash
FETCHTMP=$BUILD/fetchtmp
export ZIG_GLOBAL_CACHE_DIR=$BUILD/zigcache
export CARGO_HOME=$BUILD/cargo-home      # own registry cache: no lock contention with other builds
export CARGO_TARGET_DIR=$BUILD/target
export CARGO_BUILD_JOBS=1
export RUSTUP_TOOLCHAIN=stable           # 1.95; the pinned 1.96.1 cannot be downloaded here
export LIBGHOSTTY_VT_ZIG_SYSTEM_DIR=$ZIGSYS   # build.rs passes this to `zig build --system`
export PATH=$BUILD/bin:$PATH

start=$(date +%s)
mkdir -p "$BUILD/bin" "$ZIGSYS" "$FETCHTMP" "$ZIG_GLOBAL_CACHE_DIR" "$CARGO_HOME" "$OUT"

# 1. Zig 0.15.2 from PyPI, plus a `zig` wrapper on PATH.
$NICE python3 -m pip install -q ziglang==0.15.2
PY=$(python3 -c 'import sys; print(sys.executable)')
cat > "$BUILD/bin/zig" <<EOF
#!/bin/sh
exec $PY -m ziglang "\$@"
EOF
chmod +x "$BUILD/bin/zig"
[ "$(zig version)" = 0.15.2 ]

# 2. herdr source at the tag, without rust-toolchain.toml (it pins 1.96.1).
[ "$(git --git-dir="$HERDR_GIT" rev-parse "$TAG^{commit}")" = "$COMMIT" ]
rm -rf "$SRC"; mkdir -p "$SRC"
git --git-dir="$HERDR_GIT" archive "$TAG" | tar -x -C "$SRC"
rm -f "$SRC/rust-toolchain.toml"
VT=$SRC/vendor/libghostty-vt

# 3. Seed the zig system package dir.
# 3a. The two packages actually compiled into libghostty-vt, from their git sources; the
#     package hash zig computes must equal the one in the build.zig.zon files.
seed_real() { # git-dir rev prefix expected-hash
  local tgz=$FETCHTMP/$4.tar.gz got
  git --git-dir="$1" archive --format=tar.gz --prefix="$3/" "$2" > "$tgz"
  got=$($NICE zig fetch --global-cache-dir "$FETCHTMP/gc" "$tgz")
  [ "$got" = "$4" ] || { echo "hash mismatch for $3: got $got, want $4" >&2; exit 1; }
  rm -rf "$ZIGSYS/$4"; cp -a "$FETCHTMP/gc/p/$4" "$ZIGSYS/$4"
}
# ghostty build.zig.zon: uucode (non-lazy), = jacobsandlund/uucode tag v0.2.0
seed_real "$UUCODE_GIT" v0.2.0 uucode uucode-0.2.0-ZZjBPqZVVABQepOqZHR7vV_NcaN-wats0IB6o-Exj6m9
# pkg/highway/build.zig.zon: google/highway @ 66486a10623fa0d72fe91260f96c892e41aceb06
seed_real "$HIGHWAY_GIT" 66486a10623fa0d72fe91260f96c892e41aceb06 \
  highway-66486a10623fa0d72fe91260f96c892e41aceb06 N-V-__8AAGmZhABbsPJLfbqrh6JTHsXhY6qCaLAQyx25e0XE

# 3b. Zig packages whose modules ghostty's build graph wires into its other artifacts (bench,
#     app) at configure time: stand-ins that accept the options passed and export the modules.
stub_zig() { # hash module...
  local d=$ZIGSYS/$1; shift
  rm -rf "$d"; mkdir -p "$d"
  echo '// stand-in: never compiled for libghostty-vt' > "$d/stub.zig"
  {
    echo '// stand-in package: only lets ghostty'"'"'s build graph configure'
    echo 'const std = @import("std");'
    echo 'pub fn build(b: *std.Build) void {'
    echo '    _ = b.standardTargetOptions(.{});'
    echo '    _ = b.standardOptimizeOption(.{});'
    echo '    _ = b.option(bool, "with_tui", "stand-in");'
    for m in "$@"; do echo "    _ = b.addModule(\"$m\", .{ .root_source_file = b.path(\"stub.zig\") });"; done
    echo '}'
  } > "$d/build.zig"
}
stub_zig vaxis-0.5.1-BWNV_LosCQAGmCCNOLljCIw6j6-yt53tji6n6rwJ2BhS vaxis
stub_zig libxev-0.0.0-86vtc4IcEwCqEYxEYoN_3KXmc6A9VLcm22aVImfvecYs xev
stub_zig z2d-0.10.0-j5P_Hu-6FgBsZNgwphIqh17jDnj8_yPtD8yzjO6PpHRQ z2d
stub_zig zf-0.10.3-OIRy8RuJAACKA3Lohoumrt85nRbHwbpMcUaLES8vxDnh zf
stub_zig gobject-0.3.0-Skun7ANLnwDvEfIpVmohcppXgOvg_I6YOJFmPIsKfXk- \
  adw1 gdk4 gio2 glib2 gobject2 gtk4 xlib2 gdkx114 gdkwayland4

# 3c. Plain source tarballs (C libs, fonts, themes) only referenced by path: empty dirs.
for h in \
  N-V-__8AAAYpBACKY0n8sQbPfzY47xFRRtjXiF766UVF5ZyD `# iterm2_themes` \
  N-V-__8AABzkUgISeKGgXAzgtutgJsZc0-kkeqBBscJgMkvy `# glslang` \
  N-V-__8AANb6pwD7O1WG6L5nvD_rNMvnSc9Cpg1ijSlTYywv `# spirv_cross` \
  N-V-__8AAAzZywE3s51XfsLbP9eyEw57ae9swYB9aGB6fCMs `# wuffs` \
  N-V-__8AADYiAAB_80AWnH1AxXC0tql9thT-R-DYO1gBqTLc `# pixels (wuffs)` \
  N-V-__8AAEbOfQBnvcFcCX2W5z7tDaN8vaNZGamEQtNOe0UI `# imgui` \
  N-V-__8AANT61wB--nJ95Gj_ctmzAtcjloZ__hRqNw5lC1Kr `# dcimgui bindings` \
  N-V-__8AAIC5lwAVPJJzxnCAahSvZTIlG-HhtOvnM1uh-66x `# JetBrainsMono` \
  N-V-__8AAMVLTABmYkLqhZPLXnMl-KyN38R8UVYqGrxqO26s `# NerdFontsSymbolsOnly` \
  ; do
  mkdir -p "$ZIGSYS/$h"
done

# 4. libghostty-vt, exactly as build.rs invokes zig but with -j1; build.rs then hits the cache.
( cd "$VT" && $NICE zig build -j1 -Demit-lib-vt -Doptimize=ReleaseFast -Dsimd=true \
    -Dtarget=x86_64-linux-gnu -Dversion-string="$(cat VERSION)" -Demit-xcframework=false \
    --system "$ZIGSYS" )
ls -l "$VT/zig-out/lib/libghostty-vt.a"
zig_done=$(date +%s)

# 5. herdr itself.
( cd "$SRC" && $NICE cargo build --release --locked -j1 )
install -m 755 "$CARGO_TARGET_DIR/release/herdr" "$OUT/herdr"
end=$(date +%s)
echo "zig part: $((zig_done - start)) s, cargo part: $((end - zig_done)) s, total: $((end - start)) s"

# 6. Verify: version, then an isolated server answering ping with protocol 20.
"$OUT/herdr" --version
python3 "$(dirname "$(readlink -f "$0")")/verify-herdr.py" "$OUT/herdr"
