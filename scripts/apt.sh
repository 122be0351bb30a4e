# The one place the scripts call apt-get (Debian and Ubuntu). Sourced, not run:
#
#   . "$(dirname "$0")/apt.sh"        # (or the path from the repository's root)
#   apt_install PKG...                # apt-get update, then apt-get install -y PKG...
#   apt_get ARGS...                   # any other apt-get command (download, update with private lists, ...)
#
# On a fresh machine another apt or dpkg run often holds the package system's locks (an unattended upgrade at
# boot, cloud-init, another terminal): apt-get then fails at once with "Could not get lock ...". Here every call
# waits for the locks instead, up to HOSTFIRST_APT_LOCK_TIMEOUT seconds (default 900) for the call as a whole:
# dpkg's locks through apt's own DPkg::Lock::Timeout, and the locks that option does not cover (the package lists'
# of `apt-get update`, the download cache's) by trying again every 2 s. Past the limit it fails, saying which lock
# and which process held it. It says once when it starts waiting.
#
# apt_install needs root (as apt-get does); without it, or without apt-get, it fails naming the packages to
# install by hand. Messages are prefixed with APT_WHO (default: the running script's name).
# tests/it/apt.rs holds the locks and checks both the wait and the failure.

apt_who() { echo "${APT_WHO:-$(basename "${BASH_SOURCE[-1]:-$0}")}"; }

# apt_get ARGS...: apt-get ARGS, waiting for the locks as above; its status is apt-get's (1 after a timeout).
apt_get() {
    local limit="${HOSTFIRST_APT_LOCK_TIMEOUT:-900}"
    case "$limit" in '' | *[!0-9]*) echo "$(apt_who): HOSTFIRST_APT_LOCK_TIMEOUT=$limit is not a number of seconds" >&2; return 1 ;; esac
    # What apt says when a lock is taken (dpkg's frontend lock after DPkg::Lock::Timeout, dpkg's own, the lists',
    # the download cache's), in the C locale it is run in.
    local busy='Could not get lock|Unable to acquire the dpkg frontend lock|Unable to lock'
    local start=$SECONDS said=0 err rc left
    err="$(mktemp)"
    while :; do
        left=$((limit - (SECONDS - start)))
        [ "$left" -ge 0 ] || left=0
        rc=0
        LC_ALL=C apt-get -o "DPkg::Lock::Timeout=$left" "$@" 2>"$err" || rc=$?
        if [ "$rc" -eq 0 ] || ! grep -qE "$busy" "$err"; then
            cat "$err" >&2
            rm -f "$err"
            return "$rc"
        fi
        if [ $((SECONDS - start)) -ge "$limit" ]; then
            cat "$err" >&2
            echo "$(apt_who): gave up on 'apt-get $*' after waiting ${limit} s for the package system's lock," \
                "held by another apt or dpkg run: $(grep -m1 -oE "($busy).*" "$err")." \
                "Let that run finish (an upgrade at boot takes minutes) and start again, or set" \
                "HOSTFIRST_APT_LOCK_TIMEOUT (seconds) to wait longer." >&2
            rm -f "$err"
            return 1
        fi
        if [ "$said" = 0 ]; then
            echo "$(apt_who): another apt or dpkg run holds a lock ($(grep -m1 -oE "($busy).*" "$err"));" \
                "waiting for it, up to ${limit} s" >&2
            said=1
        fi
        sleep 2
    done
}

# apt_install PKG...: installs the packages (after apt-get update), waiting for the locks; exits the calling
# script with a message when it cannot.
apt_install() {
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "$(apt_who): please install: $* (no apt-get here)" >&2
        exit 1
    fi
    if [ "$(id -u)" != 0 ]; then
        echo "$(apt_who): installing $* needs root: run this as root, or install them (apt-get install $*) and" \
            "run it again" >&2
        exit 1
    fi
    echo "$(apt_who): installing $*" >&2
    { apt_get update -qq && DEBIAN_FRONTEND=noninteractive apt_get install -y -qq "$@"; } >&2 || {
        echo "$(apt_who): apt-get could not install $*" >&2
        exit 1
    }
}
