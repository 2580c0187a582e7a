# bench/lib/thawd.sh — a private thawd for a benchmark script, and thaw-bench
# scenarios against it.  Sourced once the script has set
#   B (the build directory), W (its temporary directory), TIER (thawd's RAM
#   tier), OUTDIR (where thawd.log and each scenario's files go), ID (the
#   function), INFER and EXPECT (thaw-bench's --infer and --expect).
# It sets PIDFILE and bad=0, traps EXIT to stop thawd, its instances and remove
# W and TIER, and gives start_thawd, stop_thawd, put_function, snapshot_function,
# run (one thaw-bench scenario whose starts must all be correct), whole_image
# and jfield.
PIDFILE=$W/thawd.pid
# The benchmarks' functions live in the tree or in /tmp: allow them there
# (thawd refuses a function's directory elsewhere; THAW_ALLOW_ROOTS).
export THAW_ALLOW_ROOTS=${THAW_ALLOW_ROOTS:-${ROOT:-$PWD}:/tmp:/var/tmp}
BENCH=$B/bench/thaw-bench
bad=0

stop_thawd() {
	local pid
	pid=$(cat "$PIDFILE" 2>/dev/null) || return 0
	kill "$pid" 2>/dev/null
	for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	rm -f "$PIDFILE"
}
bench_cleanup() {
	local r
	stop_thawd
	for r in "$W"/data/instances/*.json; do
		[ -f "$r" ] && "$B/thaw" --data-dir "$W/data" stop "$(basename "$r" .json)" >/dev/null 2>&1
	done
	rm -rf "$W" "$TIER"
}
trap bench_cleanup EXIT

# start_thawd PORT [THAWD-OPTIONS...]: on PORT (0: a free one); URL and PORT set.
start_thawd() {
	local port=$1
	shift
	rm -f "$W/port"
	"$B/thawd" --listen "127.0.0.1:$port" --port-file "$W/port" --data-dir "$W/data" \
		--ram-tier "$TIER" "$@" >>"$OUTDIR/thawd.log" 2>&1 </dev/null &
	echo $! >"$PIDFILE"
	for _ in $(seq 300); do [ -s "$W/port" ] && break; sleep 0.1; done
	[ -s "$W/port" ] || { echo "thawd did not start (see thawd.log)"; return 1; }
	PORT=$(cat "$W/port")
	URL=http://127.0.0.1:$PORT
}

# put_function FN SRC DST [KEY=JSON...]: write SRC's spec to DST with an absolute
# cwd (as thawd's PUT wants it; a relative one is taken against SRC's
# directory) and each KEY set to its JSON value (null: removed), and PUT it.
put_function() {
	local fn=$1 src=$2 dst=$3 code
	shift 3
	python3 - "$src" "$dst" "$@" <<'PY' || return 1
import json, os, sys
src, dst = sys.argv[1], sys.argv[2]
j = json.load(open(src))
if "bundle" not in j or "cwd" in j:
    j["cwd"] = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(src)),
                                             j.get("cwd", ".")))
for kv in sys.argv[3:]:
    k, v = kv.split("=", 1)
    v = json.loads(v)
    if v is None:
        j.pop(k, None)
    else:
        j[k] = v
json.dump(j, open(dst, "w"))
PY
	code=$(curl -s -o "$W/put.json" -w '%{http_code}' -X PUT "$URL/functions/$fn" -d @"$dst")
	[ "$code" = 201 ] || [ "$code" = 200 ] || { echo "PUT $fn: $code $(cat "$W/put.json")"; return 1; }
}

# jfield FILE KEY...: a value from a JSON file (KEYs nested); fails when absent.
jfield() {
	python3 - "$@" <<'PY' 2>/dev/null
import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2:]:
    v = v[k]
print(v)
PY
}

# snapshot_function FN OUT: snapshot and wait; the job into OUT, its id into SNAP.
snapshot_function() {
	echo "snapshot of $1..."
	curl -s -m 1200 -X POST "$URL/functions/$1/snapshot?wait=1" >"$2"
	SNAP=$(jfield "$2" job result snapshot)
	[ -n "$SNAP" ] || { echo "snapshot of $1 failed: $(cat "$2")"; return 1; }
	echo "snapshot $SNAP"
}

# whole_image SNAP: the tier entry of SNAP with every pages file, for the
# plain-restore baseline that copies it (a mapped entry keeps the pages of
# mapped processes only in its memory files: thaw materialize --whole).
whole_image() {
	THAW_RAM_TIER=$TIER "$B/thaw" --data-dir "$W/data" materialize --whole "$1" >/dev/null 2>"$W/whole.err" ||
		{ echo "thaw materialize --whole $1: $(cat "$W/whole.err")"; return 1; }
}

run() { # name thaw-bench-args...: OUTDIR/name.{txt,json,svg}; every start must be correct
	local name=$1
	shift
	echo "---- $name: thaw-bench $*"
	"$BENCH" --url "$URL" --function "$ID" --infer "$INFER" --expect "$EXPECT" \
		--json "$OUTDIR/$name.json" --svg "$OUTDIR/$name.svg" "$@" 2>&1 | tee "$OUTDIR/$name.txt"
	python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j["ok"] == j["attempts"] > 0 else 1)' \
		"$OUTDIR/$name.json" 2>/dev/null || { echo "$name: not every start was correct"; bad=1; }
}
