#!/usr/bin/env bash
# dcpctl decode against tshark on the same capture of N DCP mutations (~100-byte values), back to back.
#   bash benchmarks/bench_capture.sh [N]      (default 1000000)
set -euo pipefail
n=${1:-1000000}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 "$(dirname "$0")/make_capture.py" "$dir/m.pcap" --messages "$n"
echo "capture: $n DCP_MUTATION messages, $(stat -c %s "$dir/m.pcap") bytes"
run() {
  local name=$1; shift
  /usr/bin/time -f "$name: %e s wall, %U s user, peak RSS %M KB" "$@" > /dev/null 2> "$dir/err" || true
  grep -v "Running as user" "$dir/err" | tail -1
}
run "dcpctl decode --format jsonl (two processes, the default)" dcpctl decode --format jsonl "$dir/m.pcap"
run "dcpctl decode --format jsonl --jobs 1" dcpctl decode --format jsonl --jobs 1 "$dir/m.pcap"
run "tshark -T fields -e couchbase.opcode -e couchbase.extras.by_seqno" \
  tshark -r "$dir/m.pcap" -T fields -e couchbase.opcode -e couchbase.extras.by_seqno
