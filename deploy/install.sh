#!/usr/bin/env bash
# Install (or upgrade, or uninstall) paperarena as a systemd service. Idempotent: run it again
# after `git pull` to upgrade; unchanged files are left alone.
#
#   sudo deploy/install.sh                      install or upgrade, enable and (re)start
#   sudo deploy/install.sh --with-recorder      also the market-data recorder + daily rotation
#   sudo deploy/install.sh --uninstall          remove venv and units; keep config and state
#   sudo deploy/install.sh --uninstall --purge  also delete /etc/paperarena and the database
#
# Layout: /opt/paperarena/venv (the package), /etc/paperarena/{config.toml,env} (config and
# secrets, env is mode 0600), /var/lib/paperarena (state: created by systemd's StateDirectory=
# for the DynamicUser=, physically /var/lib/private/paperarena), units in /etc/systemd/system.
#
# Options:
#   --with-recorder  install/enable paperarena-recorder.service and its rotation timer too
#   --no-systemctl   never call systemctl (just install files; print what to run)
#   --no-venv        do not create/upgrade the venv (files and units only)
#   --uninstall      remove the venv and the units (config and state are kept)
#   --purge          with --uninstall: also remove config and state
# Environment:
#   PAPERARENA_PREFIX    root every path under this directory (staging, tests); implies that
#                        systemctl is not called
#   PAPERARENA_PYTHON    interpreter for the venv (default: python3, must be >= 3.11)
#   PAPERARENA_EXTRAS    pip extras to install (default: llm)
#   PAPERARENA_PIP_ARGS  extra arguments for pip install (e.g. --no-deps --no-index)
#   PAPERARENA_VENV_ARGS extra arguments for python -m venv (e.g. --system-site-packages)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX="${PAPERARENA_PREFIX:-}"
PREFIX="${PREFIX%/}"
PYTHON="${PAPERARENA_PYTHON:-python3}"
EXTRAS="${PAPERARENA_EXTRAS-llm}"
read -r -a PIP_ARGS <<<"${PAPERARENA_PIP_ARGS:-}"
read -r -a VENV_ARGS <<<"${PAPERARENA_VENV_ARGS:-}"

OPT="$PREFIX/opt/paperarena"
VENV="$OPT/venv"
ETC="$PREFIX/etc/paperarena"
UNITDIR="$PREFIX/etc/systemd/system"
STATE="$PREFIX/var/lib/paperarena"
PRIVATE_STATE="$PREFIX/var/lib/private/paperarena"
MAIN_UNIT=paperarena.service
RECORDER_UNITS=(paperarena-recorder.service paperarena-recorder-rotate.timer)
UNIT_FILES=(paperarena.service paperarena-recorder.service paperarena-recorder-rotate.service
            paperarena-recorder-rotate.timer)

uninstall=0 purge=0 use_systemctl=1 use_venv=1 with_recorder=0
for arg in "$@"; do
  case "$arg" in
    --uninstall) uninstall=1 ;;
    --purge) purge=1 ;;
    --no-systemctl) use_systemctl=0 ;;
    --no-venv) use_venv=0 ;;
    --with-recorder) with_recorder=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done
if [[ $purge -eq 1 && $uninstall -eq 0 ]]; then
  echo "install.sh: --purge only goes with --uninstall" >&2
  exit 2
fi

say() { echo "install.sh: $*"; }

systemd_running() { [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; }

can_systemctl() {
  [[ $use_systemctl -eq 1 && -z "$PREFIX" ]] && systemd_running
}

# install_file SRC DEST MODE: copy when missing or different; report what happened.
install_file() {
  local src="$1" dest="$2" mode="$3"
  if [[ -f "$dest" ]] && cmp -s "$src" "$dest"; then
    chmod "$mode" "$dest"
    say "unchanged $dest"
    return 1
  fi
  install -D -m "$mode" "$src" "$dest"
  say "installed $dest"
  return 0
}

do_uninstall() {
  if can_systemctl; then
    systemctl disable --now "${UNIT_FILES[@]}" 2>/dev/null || true
  elif [[ $use_systemctl -eq 1 && -z "$PREFIX" ]]; then
    say "systemd is not running: stop any running paperarena process yourself"
  fi
  local f
  for f in "${UNIT_FILES[@]}"; do
    if [[ -e "$UNITDIR/$f" ]]; then
      rm -f "$UNITDIR/$f"
      say "removed $UNITDIR/$f"
    fi
  done
  if can_systemctl; then
    systemctl daemon-reload
  fi
  if [[ -e "$OPT" ]]; then
    rm -rf "$OPT"
    say "removed $OPT"
  fi
  if [[ $purge -eq 1 ]]; then
    rm -rf "$ETC" "$STATE" "$PRIVATE_STATE"
    say "purged $ETC and $STATE"
  else
    say "kept config in $ETC and state in $STATE (--uninstall --purge deletes them)"
  fi
}

install_venv() {
  if [[ $use_venv -eq 0 ]]; then
    say "skipping the venv (--no-venv)"
    return
  fi
  if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "install.sh: $PYTHON is missing or older than Python 3.11 (set PAPERARENA_PYTHON)" >&2
    exit 1
  fi
  if [[ ! -x "$VENV/bin/python" ]]; then
    mkdir -p "$OPT"
    "$PYTHON" -m venv "${VENV_ARGS[@]}" "$VENV"
    say "created $VENV"
  fi
  local target="$REPO"
  [[ -n "$EXTRAS" ]] && target="${REPO}[${EXTRAS}]"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade \
    "${PIP_ARGS[@]}" "$target"
  say "installed paperarena $("$VENV/bin/python" -c \
    'from importlib.metadata import version; print(version("paperarena"))') into $VENV"
}

install_system_packages() {
  # The strategy sandbox (AlphaForgeBench) needs bubblewrap and libseccomp (Debian packages).
  if command -v bwrap >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep -q libseccomp.so.2; then
    return
  fi
  if [[ -z "$PREFIX" && $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap libseccomp2 >/dev/null
    say "installed bubblewrap and libseccomp2 (the strategy sandbox)"
  else
    say "install the Debian packages bubblewrap and libseccomp2 for the strategy sandbox"
  fi
}

install_config() {
  install -d -m 0755 "$ETC"
  if [[ -e "$ETC/config.toml" ]]; then
    say "kept $ETC/config.toml"
  else
    install -m 0644 "$REPO/examples/default.toml" "$ETC/config.toml"
    say "installed $ETC/config.toml (from examples/default.toml: edit it)"
  fi
  if [[ ! -e "$ETC/env" ]]; then
    (umask 077 && cat >"$ETC/env" <<'EOF'
# paperarena secrets, read by systemd (EnvironmentFile=) as root: KEY=value lines, no quotes
# needed. The config names these variables (api_key_env, key_env, token_env...); their values
# never appear in the logs. Restart (or reload, for agent keys) after editing.
#OPENAI_API_KEY=
#ANTHROPIC_API_KEY=
#FINNHUB_API_KEY=
#APCA_API_KEY_ID=
#APCA_API_SECRET_KEY=
EOF
    )
    say "installed $ETC/env (mode 0600: put API keys there)"
  else
    say "kept $ETC/env"
  fi
  chmod 0600 "$ETC/env"
  if [[ $(id -u) -eq 0 ]]; then
    chown root:root "$ETC/env"
  fi
  if [[ $use_venv -eq 1 ]]; then
    "$VENV/bin/paperarena" check-config "$ETC/config.toml"
  fi
}

install_units() {
  local f
  for f in "${UNIT_FILES[@]}"; do
    install_file "$REPO/systemd/$f" "$UNITDIR/$f" 0644 || true
  done
}

start_units() {
  local units=("$MAIN_UNIT")
  [[ $with_recorder -eq 1 ]] && units+=("${RECORDER_UNITS[@]}")
  if ! can_systemctl; then
    local why="--no-systemctl"
    [[ -n "$PREFIX" ]] && why="PAPERARENA_PREFIX is set"
    [[ $use_systemctl -eq 1 && -z "$PREFIX" ]] && why="systemd is not running here"
    say "not calling systemctl ($why); on the target host run:"
    say "  systemctl daemon-reload && systemctl enable --now ${units[*]}"
    return
  fi
  systemctl daemon-reload
  local u
  for u in "${units[@]}"; do
    if systemctl is-active --quiet "$u"; then
      systemctl enable --quiet "$u"
      [[ "$u" == *.service ]] && systemctl restart "$u"  # pick up the upgraded code
      say "restarted $u"
    else
      systemctl enable --now --quiet "$u"
      say "enabled and started $u"
    fi
  done
  say "status: systemctl status ${MAIN_UNIT}; logs: journalctl -u ${MAIN_UNIT} -f"
}

if [[ $uninstall -eq 1 ]]; then
  do_uninstall
  exit 0
fi
install_system_packages
install_venv
install_config
install_units
start_units
say "done"
