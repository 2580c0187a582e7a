#!/usr/bin/env bash
# A damaged snapshot heals in one pass (docs/DESIGN.md, "Restore or boot"),
# with real runc, CRIU and thawd and test/fixtures/fallback_fn.py.  A
# function snapshotted beside a twin of the same state (so that the chunks
# damaged are ones its boot makes again, which its re-snapshot would
# deduplicate against), damaged twice over:
#   1. one flipped byte in a chunk of each pack its snapshot uses;
#   2. then, in its new snapshot, flipped bytes in two chunks of one pack;
# each time, before any start, `thaw store verify` lists the chunks
# damaged; the start boots (201, "restored": false); exactly one
# re-snapshot runs; before it is ready the store's index has lost every
# chunk verify listed and no other (thawd's log names each chunk it drops);
# and the start after it is restored ("restored": true).
# Each step waits (with a generous limit) for the state it expects.
set -u
NAME=heal
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
FN=$T/fn
mkdir -p "$FN"
cp "$ROOT/test/fixtures/fallback_fn.py" "$FN/"

spec() { # SEED
	echo "{\"command\": [\"python3\", \"fallback_fn.py\"], \"cwd\": \"$FN\", \"port\": 8000,
		\"ready\": {\"http\": \"/health\", \"timeout_s\": 60}, \"env\": {\"SEED\": \"$1\"}}"
}
put_snap() { # ID SEED: register and snapshot (?wait=1)
	local st
	st=$(api PUT "/functions/$1" -d "$(spec "$2")")
	[ "$st" = 201 ] || { fail "PUT $1: $st $(cat "$T/body")"; return 1; }
	st=$(api POST "/functions/$1/snapshot?wait=1")
	[ "$st" = 200 ] || { fail "snapshot of $1: $st $(cat "$T/body")"; return 1; }
}
snap_file() { python3 -S -c "import json; print(json.load(open('$DATA/functions/$1.json'))['snapshot']['id'])"; }
snapshot_jobs() { # its snapshot jobs in this thawd
	api GET /jobs >/dev/null && jget "$T/body" "sum(1 for x in j['jobs'] if x['function'] == 'fn' and x['kind'] == 'snapshot')"
}
start() { # POST a start of fn; status on stdout, the answer in $T/start
	local st
	st=$(api POST /functions/fn/start)
	cp "$T/body" "$T/start"
	api DELETE "/instances/$(jget "$T/start" "j['instance']")" >/dev/null
	echo "$st"
}
ready_anew() { # OLD: fn's snapshot is ready, and another than OLD
	api GET /functions/fn >/dev/null &&
		[ "$(jget "$T/body" "j['snapshot']['state'] == 'ready' and j['snapshot']['id'] != '$1'")" = True ]
}

# damage MODE SNAP TWIN: flip one byte in chunks of SNAP's manifest, chosen
# among those its TWIN holds too (else any of SNAP's), the largest first:
# MODE "every", one in each pack SNAP uses; "two", two in the pack holding
# most of them.  Prints their ids.
damage() { python3 "$ROOT/test/lib/pack_damage.py" flip "$DATA/store" "$2" "$3" "$1"; }

# heals MODE TIER: damage fn's snapshot (MODE), verify, start thawd on a new
# RAM tier (nothing of it materialised), and see it heal in one pass.
heals() {
	local old st mark
	old=$(snap_file fn)
	damage "$1" "$old" "$(snap_file twin)" | sort >"$T/damaged"
	echo "$1: damaged $(wc -l <"$T/damaged") chunk(s) in a store of $(ls "$DATA/store/packs" | grep -c '\.idx$') packs"
	[ "$(wc -l <"$T/damaged")" -ge 2 ] || fail "$1: fewer than two chunks damaged: $(cat "$T/damaged")"
	# What verify finds damaged before any start: "ID<tab>why" lines.
	"$THAW" --data-dir "$DATA" store verify >"$T/verify" 2>/dev/null
	cut -f1 "$T/verify" | sort -u >"$T/verify.ids"
	cmp -s "$T/damaged" "$T/verify.ids" && ok "$1: thaw store verify lists the damaged chunks" ||
		fail "$1: thaw store verify: $(cat "$T/verify")"
	mark=$(wc -l <"$T/thawd.log")
	start_thawd --max-standby 0 --ram-tier "$SHM/$2"
	st=$(start)
	[ "$st" = 201 ] && [ "$(jget "$T/start" "j['restored']")" = False ] &&
		ok "$1: the start boots: $(jget "$T/start" "j['restore_failure']" | cut -c1-120)" ||
		fail "$1: the first start: $st $(cat "$T/start")"
	wait_for 180 ready_anew "$old" || fail "$1: no new snapshot: $(cat "$T/body")"
	# What the start and its re-snapshot dropped: what verify listed.
	tail -n +"$((mark + 1))" "$T/thawd.log" | grep -o 'chunk sha256:[0-9a-f]* is damaged: dropped' |
		cut -d' ' -f2 | sort -u >"$T/dropped"
	cmp -s "$T/dropped" "$T/verify.ids" && ok "$1: the chunks dropped before the re-snapshot are those verify listed" ||
		fail "$1: dropped before the re-snapshot: $(tr '\n' ' ' <"$T/dropped"); verify: $(tr '\n' ' ' <"$T/verify.ids")"
	st=$(start)
	[ "$st" = 201 ] && [ "$(jget "$T/start" "j['restored']")" = True ] &&
		ok "$1: the start after the one re-snapshot is restored" ||
		fail "$1: the start after the re-snapshot: $st $(cat "$T/start")"
	[ "$(snapshot_jobs)" = 1 ] && ok "$1: exactly one re-snapshot" || fail "$1: snapshot jobs: $(snapshot_jobs)"
	stop_thawd
}

start_thawd --max-standby 0
put_snap fn 7 && put_snap twin 7 || exit 1
stop_thawd
heals every t2
heals two t3
[ -z "$(own_containers)" ] || fail "containers left: $(own_containers)"
[ $fails = 0 ] && echo "e2e_heal: all passed"
exit $fails
