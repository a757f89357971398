# Shared helpers for scripts/*; sourced, not run.

# Each step line carries the wall-clock time, so that a CI log shows where the minutes go.
step() { printf '\n==> %s  [%s]\n' "$*" "$(date -u +%H:%M:%S)"; }

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
