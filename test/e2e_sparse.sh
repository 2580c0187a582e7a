#!/usr/bin/env bash
# e2e_sparse.sh — real runc + CRIU: zero-page elision at snapshot time.
#
# The function test/fixtures/sparse_fn.py holds written zeros (private
# anonymous), seeded random data, a private file mapping whose dirtied pages
# are zero over non-zero file data, shared anonymous memory, and a forked child
# that zeroed copy-on-write memory its parent still holds non-zero.  Run
# outside any container first, it gives the checksum every instance must
# answer.  Then: snapshot through thaw, check the manifest says zero pages
# were elided (image smaller after than before), start instances, check each
# answers exactly that checksum, that one can still write to and read back the
# elided region, stop them and check nothing is left.  Last, a snapshot with
# "elide_zero": false elides nothing, and an instance of it (the baseline of
# the restore times printed as figures) answers the same.
#
# RESTORE_ARGS: extra arguments to 'thaw start' (e.g. a lazy-restore mode).
# SPARSE_ZERO_MIB / SPARSE_RANDOM_MIB: the fixture's sizes (256 / 16 here).
set -u
cd "${THAW_ROOT:-$(dirname "$0")/..}"
ROOT=$PWD
B=${THAW_BUILD:-$ROOT/build}
THAW=$B/thaw
RESTORE_ARGS=${RESTORE_ARGS:-}
ZERO_MIB=${SPARSE_ZERO_MIB:-256}
RANDOM_MIB=${SPARSE_RANDOM_MIB:-16}

. "$ROOT/test/lib/require.sh"
case " $RESTORE_ARGS " in *" --lazy "*) require_restore_tools uffd ;; *) require_restore_tools ;; esac

W=$(mktemp -d /tmp/e2e_sparse.XXXXXX)
TIER=$(mktemp -d /dev/shm/e2e_sparse.XXXXXX)
D=$W/data
FN=e2e-s$$
export THAW_RAM_TIER=$TIER THAW_RAM_TIER_BYTES=$((2 << 30))
unset THAW_DATA_DIR THAW_STORE
REF_PID=

. "$ROOT/test/lib/instances.sh"

cleanup() {
	[ -n "$REF_PID" ] && kill -9 -- "-$REF_PID" 2>/dev/null
	cleanup_instances
	rm -rf "$W" "$TIER"
}
trap cleanup EXIT

# The checksum's digest, after checking that all its self-checks hold.
digest() { # < checksum JSON
	python3 -c 'import json,sys
c = json.load(sys.stdin)
bad = [k for k, v in c["checks"].items() if v is not True]
print(c["sha256"] if not bad else "checks-failed:" + ",".join(bad))'
}

FN_DIR=$W/fn
mkdir -p "$FN_DIR"
cp "$ROOT/test/fixtures/sparse_fn.py" "$FN_DIR/"
export SPARSE_ZERO_MIB=$ZERO_MIB SPARSE_RANDOM_MIB=$RANDOM_MIB

# --- the original, outside any container: the answer to expect ---------------
# (it also writes the data file, sparse_data.bin, that the function maps)
. "$ROOT/test/lib/free_port.sh"
PORT=$(free_port)
(cd "$FN_DIR" && PORT=$PORT exec setsid python3 sparse_fn.py) &
REF_PID=$!
for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
EXPECT=$(curl -sf --max-time 60 "http://127.0.0.1:$PORT/checksum" | digest)
kill -9 -- "-$REF_PID" 2>/dev/null
wait "$REF_PID" 2>/dev/null
REF_PID=
case "$EXPECT" in
"" | checks-failed*) echo "FAIL: the original's checksum: '$EXPECT'"; exit 1 ;;
esac
echo "the original answers $EXPECT (zeros $ZERO_MIB MiB, random $RANDOM_MIB MiB)"

spec() { # elide_zero value -> spec on stdout
	cat <<EOF
{"command": ["python3", "sparse_fn.py"], "cwd": "$FN_DIR",
 "env": {"SPARSE_ZERO_MIB": "$ZERO_MIB", "SPARSE_RANDOM_MIB": "$RANDOM_MIB"}, "port": 8000,
 "ready": {"http": "/health", "timeout_s": 120},
 "warmup": [{"method": "GET", "path": "/checksum"}], "gpu": false, "elide_zero": $1}
EOF
}

# --- snapshot, with elision ---------------------------------------------------
spec true >"$W/spec.json"
if ! "$THAW" --data-dir "$D" snapshot --id "$FN" "$W/spec.json" >"$W/snap.json" 2>"$W/snap.err"; then
	cat "$W/snap.err"
	echo "FAIL: thaw snapshot"
	exit 1
fi
SNAP=$(jget "$W/snap.json" snapshot)
MANIFEST=$D/store/manifests/${SNAP#sha256:}
[ -f "$MANIFEST" ] || { echo "FAIL: no manifest $MANIFEST"; exit 1; }
read -r BEFORE AFTER ELIDED ELIDE_MS <<<"$(python3 -c 'import json,sys
m = json.load(open(sys.argv[1]))["meta"]
print(m["image_bytes_before_elision"], m["image_bytes"], m["zero_pages_elided"], m["timings_ms"]["elide"])' "$MANIFEST")"
echo "figure: e2e_sparse image_bytes_before_elision $BEFORE"
echo "figure: e2e_sparse image_bytes $AFTER"
echo "figure: e2e_sparse zero_pages_elided $ELIDED"
echo "figure: e2e_sparse elide_ms $ELIDE_MS"
[ "$AFTER" -lt "$BEFORE" ] && ok "elision: image $BEFORE -> $AFTER bytes, $ELIDED zero pages" ||
	fail "no elision: image $BEFORE -> $AFTER bytes"
# At least the zeros region went (the file mapping's zero pages must not).
[ "$ELIDED" -ge $((ZERO_MIB * 256)) ] || fail "only $ELIDED pages elided, the zeros alone are $((ZERO_MIB * 256))"
[ "$(jget "$W/snap.json" image_bytes)" = "$AFTER" ] || fail "thaw snapshot's image_bytes is not the manifest's"

# --- instances: each answers exactly as the original -----------------------
N=2
# shellcheck disable=SC2086 # RESTORE_ARGS is a list of arguments
start_instances $N "$SNAP" $RESTORE_ARGS
for i in $(seq 1 $N); do
	got=$(curl -sf --max-time 60 "http://${EP[$i]}/checksum" | digest)
	[ "$got" = "$EXPECT" ] && ok "instance $i answers the original's checksum" ||
		fail "instance $i answers '$got', expected $EXPECT"
done

# Lazily, the holes between an image's runs of pages (elided zero pages inside
# a mapping) are mapped to the zero page as the fill reaches them: the
# checksums above read them, and some were zeroed so (the daemon's summary).
case " $RESTORE_ARGS " in *" --lazy "*)
	holes=0
	for i in $(seq 1 $N); do
		log=$D/instances/${ID[$i]}/lazy-pages.log
		for _ in $(seq 100); do grep -q "lazy-pages: done" "$log" 2>/dev/null && break; sleep 0.1; done
		h=$(sed -n 's/.* \([0-9]*\) in holes,.*/\1/p' "$log" | tail -n 1)
		holes=$((holes + ${h:-0}))
	done
	[ "$holes" -gt 0 ] && ok "the daemons zeroed $holes pages of holes ahead of the reads" ||
		fail "no hole pages zeroed (lazy-pages.log: $(tail -n 1 "$log"))"
	;;
esac

# The elided region is ordinary memory: written and read back.
w=$(curl -sf --max-time 60 "http://${EP[1]}/write" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ok"])')
[ "$w" = True ] && ok "instance 1 writes and reads back the elided region" || fail "write to the elided region: $w"
got=$(curl -sf --max-time 60 "http://${EP[1]}/checksum" | python3 -c 'import json,sys; print(json.load(sys.stdin)["checks"]["zeros_zero"])')
[ "$got" = False ] || fail "instance 1: the zeros region still reads zero after the write"
got=$(curl -sf --max-time 60 "http://${EP[2]}/checksum" | digest)
[ "$got" = "$EXPECT" ] && ok "instance 2 is unchanged by instance 1's write" || fail "instance 2 answers '$got' after instance 1's write"

stop_instances
check_nothing_left "after stop"

# --- elide_zero false: nothing elided --------------------------------------
spec false >"$W/spec-noelide.json"
if "$THAW" --data-dir "$D" snapshot --id "$FN-n" "$W/spec-noelide.json" >"$W/snap2.json" 2>"$W/snap2.err"; then
	M2=$D/store/manifests/$(jget "$W/snap2.json" snapshot | sed 's/^sha256://')
	read -r B2 A2 E2 <<<"$(python3 -c 'import json,sys
m = json.load(open(sys.argv[1]))["meta"]
print(m["image_bytes_before_elision"], m["image_bytes"], m["zero_pages_elided"])' "$M2")"
	echo "figure: e2e_sparse image_bytes_without_elision $A2"
	[ "$E2" = 0 ] && [ "$A2" = "$B2" ] && ok "elide_zero false: nothing elided ($A2 bytes)" ||
		fail "elide_zero false: $E2 pages elided, $B2 -> $A2 bytes"
	[ "$A2" -gt "$AFTER" ] || fail "the image without elision ($A2) is not larger than with ($AFTER)"
	# The same function restored from the full image: same answer; its restore
	# time is the baseline for the instances above.
	# shellcheck disable=SC2086
	if "$THAW" --data-dir "$D" start $RESTORE_ARGS "$(jget "$W/snap2.json" snapshot)" >"$W/start-n.json" 2>"$W/start-n.err"; then
		echo "instance from the full image: timings $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["timings_ms"])' "$W/start-n.json")"
		for i in 1 2; do
			echo "figure: e2e_sparse start${i}_criu_restore_ms_elided $(jget "$W/start$i.json" timings_ms criu_restore)"
		done
		echo "figure: e2e_sparse start_criu_restore_ms_full $(jget "$W/start-n.json" timings_ms criu_restore)"
		got=$(curl -sf --max-time 60 "http://$(jget "$W/start-n.json" endpoint)/checksum" | digest)
		[ "$got" = "$EXPECT" ] && ok "the instance from the full image answers the original's checksum" ||
			fail "the instance from the full image answers '$got'"
		"$THAW" --data-dir "$D" stop "$(jget "$W/start-n.json" instance)" >/dev/null 2>&1 ||
			fail "stop of the instance from the full image"
	else
		fail "start from the full image: $(cat "$W/start-n.err")"
	fi
else
	fail "thaw snapshot with elide_zero false: $(cat "$W/snap2.err")"
fi
check_nothing_left "after the second snapshot"

[ $fails = 0 ] && echo "e2e_sparse: all good" || echo "e2e_sparse: $fails failure(s)"
[ $fails = 0 ]
