# Sourced by the serve benchmarks: `start_server HEARTH MODEL [serve options]` starts
# `hearth serve` on a free port, stops it when the script exits, and sets `pid` and `addr`
# (host:port) once it listens.
start_server() {
  local hearth=$1 model=$2
  shift 2
  server_log=$(mktemp)
  "$hearth" serve -m "$model" --port 0 -q "$@" 2>"$server_log" &
  pid=$!
  trap 'kill $pid 2>/dev/null || true; rm -f "$server_log"' EXIT
  for _ in $(seq 120); do grep -q "listening on" "$server_log" && break; sleep 0.5; done
  addr=$(sed -n 's/.*listening on http:\/\///p' "$server_log" | head -1)
  [ -n "$addr" ] || { echo "hearth serve did not start:" >&2; cat "$server_log" >&2; exit 1; }
}
