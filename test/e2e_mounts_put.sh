#!/usr/bin/env bash
# A spec's "mounts" that cannot work are refused at the PUT, saying why
# (issue 44, L5 and H2's overlap rule), not accepted and then failed as a
# 500 at the snapshot.  PUTs only: no container runs.
#   1. 400: a source that is a file, or does not exist; a destination
#      thaw binds itself for a function without a bundle (/etc, /usr/…),
#      /tmp, the function's cwd (or under or above it), destinations nested
#      in one another;
#   2. 403: a read-write source that holds, or lies in, another path the
#      function reaches (its cwd, its other mounts); or one of another
#      function's paths (the message naming it), either way round;
#      thaw snapshot on the same data directory refuses such a spec too;
#   3. 201: read-only mounts that nest, and the same read-only source in two
#      functions;
#   4. two clashing PUTs at once are never both registered.
set -u
B=${THAW_BUILD:-$PWD/build}
ROOT=${THAW_ROOT:-$PWD}
THAWD=$B/thawd
THAW=$B/thaw
. "$ROOT/test/lib/require.sh"
command -v python3 >/dev/null || skip "no python3"
unset THAW_ALLOW_ROOTS

NAME=mounts-put
. "$ROOT/test/lib/thawd_e2e.sh"
A=$T/allowed
mkdir -p "$A/fn" "$A/m/sub" "$A/other" "$A/shared"
echo x >"$A/file"
start_thawd --allow-root "$A"

# put ID WANT-STATUS WANT-CODE JSON-FIELDS [WANT-IN-MESSAGE]
put() {
	local st
	st=$(api PUT "/functions/$1" -d "{\"command\": [\"python3\", \"-c\", \"pass\"], \"port\": 8000,
	  \"cwd\": \"$A/fn\", $4}")
	if [ "$st" = "$2" ] && { [ -z "$3" ] || grep -q "\"code\":\"$3\"" "$T/body"; } &&
		{ [ -z "${5:-}" ] || grep -qF "$5" "$T/body"; }; then
		ok "$1: $st $(head -c 240 "$T/body")"
	else
		fail "$1: $st, not $2 $3 ${5:+(saying $5)}: $(head -c 300 "$T/body")"
	fi
}
m() { echo "{\"source\": \"$1\", \"destination\": \"$2\", \"readonly\": $3}"; }

# ---- 1. the spec's own mistakes: 400 ----
put file 400 bad_request "\"mounts\": [$(m "$A/file" /d true)]" "not a directory"
put missing 400 bad_request "\"mounts\": [$(m "$A/nothing" /d true)]" "does not exist"
put etc 400 bad_request "\"mounts\": [$(m "$A/m" /etc true)]" "/etc"
put usrlib 400 bad_request "\"mounts\": [$(m "$A/m" /usr/lib/x true)]" "/usr"
put opt 400 bad_request "\"mounts\": [$(m "$A/m" /opt true)]" "/opt"
put tmp 400 bad_request "\"mounts\": [$(m "$A/m" /tmp true)]" "/tmp"
put atcwd 400 bad_request "\"mounts\": [$(m "$A/m" "$A/fn" true)]" "cwd"
put undercwd 400 bad_request "\"mounts\": [$(m "$A/m" "$A/fn/data" true)]" "cwd"
put nested 400 bad_request "\"mounts\": [$(m "$A/m" /data true), $(m "$A/other" /data/more true)]" "nest"

# ---- 2. a directory a function writes, reached by nothing else: 403 ----
put rwcwd 403 forbidden "\"mounts\": [$(m "$A" /d false)]" "cwd"
put rwnest 403 forbidden "\"mounts\": [$(m "$A/m" /a false), $(m "$A/m/sub" /b true)]" "mounts[0].source"
put writer 201 "" "\"mounts\": [$(m "$A/m" /m false)]"
put inside 403 forbidden "\"mounts\": [$(m "$A/m/sub" /s true)]" "function writer"
put holder 403 forbidden "\"mounts\": [$(m "$A/m" /s true)]" "function writer"
mkdir -p "$A/m/fn2"
st=$(api PUT /functions/cwdin -d "{\"command\": [\"python3\", \"-c\", \"pass\"], \"port\": 8000, \"cwd\": \"$A/m/fn2\"}")
[ "$st" = 403 ] && grep -q "function writer" "$T/body" &&
	ok "a cwd inside another function's read-write mount: 403 $(head -c 200 "$T/body")" ||
	fail "a cwd inside writer's read-write mount: $st $(head -c 300 "$T/body")"
put second 403 forbidden "\"mounts\": [$(m "$A/m" /m false)]" "function writer"
# thaw snapshot, beside thawd on its data directory, holds a spec to the
# same rule against the same functions: refused (exit 2) before it runs.
echo "{\"command\": [\"true\"], \"port\": 8000, \"cwd\": \"$A/fn\",
  \"mounts\": [$(m "$A/m/sub" /s true)]}" >"$T/cli.json"
out=$(THAW_ALLOW_ROOTS=$A THAW_DATA_DIR=$DATA timeout 120 "$THAW" snapshot --id cli-inside "$T/cli.json" 2>&1)
rc=$?
[ $rc = 2 ] && grep -q "function writer" <<<"$out" &&
	ok "thaw snapshot of a source inside writer's read-write mount: exit 2, $(head -c 200 <<<"$out")" ||
	fail "thaw snapshot of a source inside writer's read-write mount: exit $rc, not 2 naming writer: $(head -c 300 <<<"$out")"

# ---- 3. read-only sharing is fine ----
put roshare 201 "" "\"mounts\": [$(m "$A/shared" /a true), $(m "$A/other" /b true)]"
put roshare2 201 "" "\"mounts\": [$(m "$A/shared" /a true)]"
put writer 200 "" "\"mounts\": [$(m "$A/m" /m false)]" # its own PUT again: no clash with itself

# Two PUTs at once whose paths clash: never both let in.
both=0
for i in $(seq 10); do
	mkdir -p "$A/race$i/sub"
	pids=""
	for f in a b; do
		[ $f = a ] && src=$A/race$i || src=$A/race$i/sub
		curl -s -o /dev/null -w '%{http_code}\n' -X PUT -H 'Content-Type: application/json' \
			"$URL/functions/race$i$f" -d "{\"command\": [\"true\"], \"port\": 8000,
			  \"cwd\": \"$A/fn\", \"mounts\": [$(m "$src" /r false)]}" >"$T/race.$f" &
		pids="$pids $!"
	done
	wait $pids
	[ "$(cat "$T/race.a")" = 201 ] && [ "$(cat "$T/race.b")" = 201 ] && both=$((both + 1))
done
[ $both = 0 ] && ok "10 pairs of clashing PUTs at once: never both registered" ||
	fail "$both of 10 pairs of clashing PUTs at once were both registered"

[ "$(api GET /functions/file)" = 404 ] || fail "a refused function was registered"
echo "$fails failure(s)"
[ $fails = 0 ]
