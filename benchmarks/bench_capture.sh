#!/usr/bin/env bash
# dcpctl decode against tshark on the same capture, back to back, each run twice.
#   bash benchmarks/bench_capture.sh [N] [SHAPE] [gzip|zstd|lz4|ring|mixed]   (defaults: 1000000, realistic)
# SHAPE is make_capture.py's: realistic (ACKs, five connections, mixed messages), sessions or bare.
# gzip: both read the capture gzip-compressed (gzip -6), as a ticket attachment comes; zstd and lz4: compressed
# by those programs at their default levels.
# ring: the capture cut into files of 100,000 frames (editcap -c, as tcpdump -C cuts), read by dcpctl as one
# capture (decode 'ring*') beside the whole file, and by tshark one file after the other, as its users do.
# mixed: a second node's capture of N messages on raw IP (other addresses, another seed) merged by mergecap
# with the first into a pcapng file of two link types, which dcpctl reads itself where libpcap stops; beside
# it the same two captures both on Ethernet, merged alike, which libpcap reads.
set -euo pipefail
n=${1:-1000000}
shape=${2:-realistic}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 "$(dirname "$0")/make_capture.py" "$dir/m.pcap" --messages "$n" --shape "$shape"
echo "capture: about $n messages, shape $shape, $(stat -c %s "$dir/m.pcap") bytes"
case "${3:-}" in
  gzip) gzip -6 -c "$dir/m.pcap" > "$dir/packed" ;;
  zstd|lz4) "$3" -q -c "$dir/m.pcap" > "$dir/packed" ;;
esac
if [ -e "$dir/packed" ]; then
  mv "$dir/packed" "$dir/m.pcap"  # the same name: found compressed by its first bytes, by both readers
  echo "compressed with $3: $(stat -c %s "$dir/m.pcap") bytes"
fi
run() {
  local name=$1; shift
  /usr/bin/time -f "$name: %e s wall, %U s user, %S s sys, peak RSS %M KB" "$@" > /dev/null 2> "$dir/err" || true
  grep -v "Running as user" "$dir/err" | tail -1
}
if [ "${3:-}" = mixed ]; then
  for linktype in raw ethernet; do
    python3 "$(dirname "$0")/make_capture.py" "$dir/$linktype.pcap" --messages "$n" --seed 8 --linktype "$linktype" \
      --host 10.1.2.3
  done
  mergecap -w "$dir/mixed.pcapng" "$dir/m.pcap" "$dir/raw.pcap"
  mergecap -w "$dir/same.pcapng" "$dir/m.pcap" "$dir/ethernet.pcap"
  echo "merged: $(stat -c %s "$dir/mixed.pcapng") bytes of two link types, $(stat -c %s "$dir/same.pcapng") of one"
  for round in 1 2; do
    echo "round $round"
    for f in mixed same; do
      run "dcpctl decode --format jsonl, $f" dcpctl decode --format jsonl "$dir/$f.pcapng"
      run "dcpctl decode --format jsonl --jobs 1, $f" dcpctl decode --format jsonl --jobs 1 "$dir/$f.pcapng"
      run "tshark -T fields, $f" tshark -r "$dir/$f.pcapng" -T fields -e couchbase.opcode -e couchbase.extras.by_seqno
    done
  done
  exit 0
fi
if [ "${3:-}" = ring ]; then
  editcap -c 100000 "$dir/m.pcap" "$dir/ring.pcap"
  echo "cut into $(ls "$dir"/ring_* | wc -l) files of 100,000 frames"
  for round in 1 2; do
    echo "round $round"
    run "dcpctl decode --format jsonl, the ring" dcpctl decode --format jsonl "$dir/ring_*"
    run "dcpctl decode --format jsonl, the whole capture" dcpctl decode --format jsonl "$dir/m.pcap"
    run "dcpctl decode --format jsonl --jobs 1, the ring" dcpctl decode --format jsonl --jobs 1 "$dir/ring_*"
    run "dcpctl decode --format jsonl --jobs 1, the whole capture" dcpctl decode --format jsonl --jobs 1 "$dir/m.pcap"
    run "tshark -T fields, each file of the ring in turn" bash -c 'for f in "$0"/ring_*; do
      tshark -r "$f" -T fields -e couchbase.opcode -e couchbase.extras.by_seqno; done' "$dir"
  done
  exit 0
fi
for round in 1 2; do
  echo "round $round"
  run "dcpctl decode --format jsonl (two processes, the default)" dcpctl decode --format jsonl "$dir/m.pcap"
  run "dcpctl decode --format jsonl --jobs 1" dcpctl decode --format jsonl --jobs 1 "$dir/m.pcap"
  run "tshark -T fields -e couchbase.opcode -e couchbase.extras.by_seqno" \
    tshark -r "$dir/m.pcap" -T fields -e couchbase.opcode -e couchbase.extras.by_seqno
done
