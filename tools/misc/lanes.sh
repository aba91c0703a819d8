# Sourced by the tools/*.sh scripts: the verified OpenMMLab stacks of requirements/lanes.txt.
#   select_lane NAME   sets LANE, VENV_DIR, CONSTRAINTS_FILE, MMENGINE_DIST and MMCV_DIST from
#                      the lane's row (an empty NAME: the first row, the default lane) and
#                      DEFAULT_LANE; an unknown name prints the known ones and exits 2.
LANES_FILE="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/requirements/lanes.txt"

select_lane() {
  local name="$1" row known
  known="$(awk '!/^#/ && NF {print $1}' "$LANES_FILE" | tr '\n' ' ')"
  DEFAULT_LANE="${known%% *}"
  name="${name:-$DEFAULT_LANE}"
  row="$(awk -v lane="$name" '!/^#/ && $1 == lane' "$LANES_FILE")"
  if [ -z "$row" ]; then
    echo "unknown lane '$name' (known: ${known% }; see requirements/lanes.txt)" >&2
    exit 2
  fi
  read -r LANE VENV_DIR CONSTRAINTS_FILE MMENGINE_DIST MMCV_DIST _ <<<"$row"
}
