# Shared helpers for scripts/*; sourced, not run.

step() { printf '\n==> %s\n' "$*"; }

# Installs Debian packages whose commands are missing. Package installs must not start
# system services (a system mosquitto on port 1883 would collide with `mqstate serve`),
# so a temporary policy-rc.d forbids that while apt runs.
ensure_debian_packages() {
    local missing=()
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "missing Debian packages: ${missing[*]} (run as root, or install them)" >&2
        return 1
    fi
    local policy=/usr/sbin/policy-rc.d created_policy=
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created_policy=1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    [ -n "$created_policy" ] && rm -f "$policy"
    return 0
}
