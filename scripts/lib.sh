# Shared helpers for scripts/*; sourced, not run.

# Each step line carries the wall-clock time, so that a CI log shows where the minutes go.
step() { printf '\n==> %s  [%s]\n' "$*" "$(date -u +%H:%M:%S)"; }

# Runs a command as root: directly when root, else with password-less sudo.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        sudo -n "$@"
    else
        echo "needs root or password-less sudo: $*" >&2
        return 1
    fi
}

# Newest glibc symbol version an ELF file needs (objdump -T reads every architecture): the
# oldest glibc it runs on.
glibc_floor() {
    objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n1
}

# napi-rs's name of a Linux target: the npm package's addon is mqstate.NAME.node, and the
# per-platform package holding it mqstate-NAME (scripts/dist, scripts/test-install).
node_platform() {
    case "$1" in
        x86_64-unknown-linux-gnu) echo linux-x64-gnu ;;
        aarch64-unknown-linux-gnu) echo linux-arm64-gnu ;;
        *) echo "no Node platform for $1" >&2; return 1 ;;
    esac
}

# Installs Debian packages whose commands are missing. Package installs must not start
# system services (a system mosquitto on port 1883 would collide with `mqstate serve`),
# so a temporary policy-rc.d forbids that while apt runs.
ensure_debian_packages() {
    local missing=()
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            echo "missing Debian packages: ${missing[*]} (run as root or with password-less sudo, or install them)" >&2
            return 1
        fi
    fi
    echo "installing Debian packages: ${missing[*]}"
    local policy=/usr/sbin/policy-rc.d created_policy=
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null &&
            "${sudo[@]}" chmod +x "$policy" && created_policy=1
    fi
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${missing[@]}"
    [ -n "$created_policy" ] && "${sudo[@]}" rm -f "$policy"
    return 0
}

# Lays out the C/C++ SDK in DEST from the cargo build in BUILD (the crate mqstate-ffi's
# libmqstate_ffi.{so,a}: a crate's library cannot be called `mqstate`, the core's name):
#   DEST/include/mqstate.h, DEST/lib/libmqstate.{so,a}, DEST/lib/pkgconfig/mqstate.pc,
#   DEST/lib/cmake/mqstate/ (find_package)
# One name (libmqstate, -lmqstate) and one pkg-config template (packaging/c-sdk/mqstate.pc.in,
# relocatable) for the build tree (scripts/build-c) and the released SDK (scripts/dist).
# With "static" as the fifth argument (the musl targets, which have no shared library) the
# SDK holds the static library only, and beside it libmqstate_unwind.a: Rust's standard library
# calls an unwinder (_Unwind_*) that its staticlib does not include, and a musl system may have
# none (Alpine's gcc has libgcc_eh, zig's has its own, plain musl-gcc none); this is the one
# Rust links its own musl programs with (LLVM's libunwind, from the toolchain's self-contained
# directory). pkg-config then lists it and musl's libc (which holds pthread, dl, m, rt and util).
c_sdk_layout() {
    local build=$1 dest=$2 version=$3 triple=${4:-} kind=${5:-shared}
    rm -rf "$dest"
    mkdir -p "$dest/include" "$dest/lib/pkgconfig" "$dest/lib/cmake/mqstate"
    cp include/mqstate.h "$dest/include/"
    cp "$build/libmqstate_ffi.a" "$dest/lib/libmqstate.a"
    local private=()
    if [ "$kind" = static ]; then
        cp "$(rustc --print sysroot)/lib/rustlib/$triple/lib/self-contained/libunwind.a" \
            "$dest/lib/libmqstate_unwind.a"
        private=(-e 's|^Libs.private:.*|Libs.private: -lmqstate_unwind -lc|')
    else
        cp "$build/libmqstate_ffi.so" "$dest/lib/libmqstate.so"
        # The SONAME is set at link time (bindings/c/build.rs): a program linked with -lmqstate
        # (or by CMake, through the full path) needs "libmqstate.so", not the path it was linked from.
        objdump -p "$dest/lib/libmqstate.so" | grep 'SONAME *libmqstate.so$' >/dev/null ||
            { echo "libmqstate.so has no SONAME libmqstate.so" >&2; return 1; }
    fi
    sed -e "s|@VERSION@|$version|g" "${private[@]}" packaging/c-sdk/mqstate.pc.in >"$dest/lib/pkgconfig/mqstate.pc"
    cp packaging/c-sdk/mqstateConfig.cmake "$dest/lib/cmake/mqstate/"
    sed -e "s|@VERSION@|$version|g" -e "s|@TRIPLE@|$triple|g" \
        packaging/c-sdk/mqstateConfigVersion.cmake.in >"$dest/lib/cmake/mqstate/mqstateConfigVersion.cmake"
}
