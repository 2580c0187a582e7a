#!/usr/bin/env bash
# PUT racing DELETE on one function is never a 5xx (issue 44, L10), with a
# real thawd: 8 clients each PUT and DELETE the same id 60 times, 960
# requests; every answer is 200/201 (PUT), 204 (DELETE), 404 (DELETE of a
# function already gone) or 409 (the other request holds it): a lost race is
# the client's to retry, never the server's error.  Then the id is PUT once
# more and is there, and the function files are only that one.
set -u
B=${THAW_BUILD:-$PWD/build}
ROOT=${THAW_ROOT:-$PWD}
THAWD=$B/thawd
THAW=$B/thaw
. "$ROOT/test/lib/require.sh"
require_restore_tools
command -v python3 >/dev/null || skip "no python3"

NAME=putdel
. "$ROOT/test/lib/thawd_e2e.sh"
FN=$T/fn
mkdir -p "$FN"
start_thawd --allow-root "$FN"

# req N METHOD [curl args]: one request of client N: "METHOD status" on
# stdout; a 5xx's body kept in $T/why.N.
req() {
	local n=$1 m=$2 st
	shift 2
	st=$(curl -s -o "$T/body.$n" -w '%{http_code}' -X "$m" \
		-H 'Content-Type: application/json' "$URL/functions/race" "$@")
	echo "$m $st"
	case $st in 5*) echo "$m $st $(cat "$T/body.$n")" >>"$T/why.$n" ;; esac
}
# client N: 60 rounds of PUT then DELETE.
client() {
	local k
	for k in $(seq 60); do
		req "$1" PUT -d "{\"command\": [\"python3\", \"app.py\"], \"cwd\": \"$FN\",
			\"port\": 8000, \"env\": {\"K\": \"$1-$k\"}}"
		req "$1" DELETE
	done >"$T/client.$1"
}
pids=""
for n in $(seq 8); do
	client "$n" &
	pids="$pids $!"
done
wait $pids
cat "$T"/client.* >"$T/all"
total=$(wc -l <"$T/all")
echo "answers: $(sort "$T/all" | uniq -c | tr '\n' ';')"
[ "$total" = 960 ] && ok "960 answers" || fail "$total answers, not 960"
bad=$(grep -vE '^(PUT (200|201|409)|DELETE (204|404|409))$' "$T/all" | sort | uniq -c)
[ -z "$bad" ] && ok "no answer but 200/201/204/404/409" ||
	fail "unexpected answers: $bad; $(cat "$T"/why.* 2>/dev/null | head -n 5)"

st=$(api PUT /functions/race -d "{\"command\": [\"python3\", \"app.py\"], \"cwd\": \"$FN\", \"port\": 8000}")
[ "$st" = 201 ] || [ "$st" = 200 ] || fail "the last PUT: $st $(cat "$T/body")"
st=$(api GET /functions/race)
[ "$st" = 200 ] && ok "the function is there after the race" || fail "GET: $st $(cat "$T/body")"
files=$(ls "$DATA/functions")
[ "$files" = race.json ] && ok "one function file" || fail "function files: $files"
stop_thawd || fail "thawd exited $?"

[ $fails = 0 ] && echo "all ok"
exit $((fails != 0))
