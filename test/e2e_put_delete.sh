#!/usr/bin/env bash
# PUT racing DELETE on one function is never a 5xx (issue 44, L10), with a
# real thawd: 8 clients each PUT and DELETE the same id 60 times, 960
# requests; every answer is 200/201 (PUT), 204 (DELETE), 404 (DELETE of a
# function already gone) or 409 (the other request holds it): a lost race is
# the client's to retry, never the server's error.  Then the id is PUT once
# more and is there, and the function files are only that one.
set -u
NAME=putdel
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
FN=$T/fn
mkdir -p "$FN"
start_thawd --allow-root "$FN"

# client N: 60 rounds of PUT then DELETE, all 120 requests from one curl
# (-K: a config of one operation a request), on the connection it keeps:
# "METHOD status body-file" a line into $T/client.N.  One curl a request
# was 960 processes, most of this test's CPU (50 s) on a machine where a
# process costs ~40 ms to start.
client() {
	local n=$1 k b
	for k in $(seq 60); do
		b=$T/body.$n.$k
		printf 'url = "%s"\nrequest = "PUT"\nheader = "Content-Type: application/json"\n' "$URL/functions/race"
		printf 'data = "{\\"command\\": [\\"python3\\", \\"app.py\\"], \\"cwd\\": \\"%s\\", ' "$FN"
		printf '\\"port\\": 8000, \\"env\\": {\\"K\\": \\"%s\\"}}"\n' "$n-$k"
		printf 'output = "%s"\nwrite-out = "PUT %%{http_code} %s\\n"\nnext\n' "$b.put" "$b.put"
		printf 'url = "%s"\nrequest = "DELETE"\nheader = "Content-Type: application/json"\n' "$URL/functions/race"
		printf 'output = "%s"\nwrite-out = "DELETE %%{http_code} %s\\n"\n' "$b.del" "$b.del"
		[ "$k" = 60 ] || echo next
	done >"$T/client.$n.conf"
	curl -s -K "$T/client.$n.conf" >"$T/client.$n" || echo "client $n: curl exited $?" >&2
}
pids=""
for n in $(seq 8); do
	client "$n" &
	pids="$pids $!"
done
wait $pids
# A 5xx's body, to say why.
awk '$2 ~ /^5/ { print $3 }' "$T"/client.[0-9] | while read -r f; do
	echo "$(basename "$f"): $(cat "$f")"
done >"$T/why"
cut -d' ' -f1,2 "$T"/client.[0-9] >"$T/all"
total=$(wc -l <"$T/all")
echo "answers: $(sort "$T/all" | uniq -c | tr '\n' ';')"
[ "$total" = 960 ] && ok "960 answers" || fail "$total answers, not 960"
bad=$(grep -vE '^(PUT (200|201|409)|DELETE (204|404|409))$' "$T/all" | sort | uniq -c)
[ -z "$bad" ] && ok "no answer but 200/201/204/404/409" ||
	fail "unexpected answers: $bad; $(head -n 5 "$T/why")"

st=$(api PUT /functions/race -d "{\"command\": [\"python3\", \"app.py\"], \"cwd\": \"$FN\", \"port\": 8000}")
[ "$st" = 201 ] || [ "$st" = 200 ] || fail "the last PUT: $st $(cat "$T/body")"
st=$(api GET /functions/race)
[ "$st" = 200 ] && ok "the function is there after the race" || fail "GET: $st $(cat "$T/body")"
files=$(ls "$DATA/functions")
[ "$files" = race.json ] && ok "one function file" || fail "function files: $files"
stop_thawd || fail "thawd exited $?"

[ $fails = 0 ] && echo "all ok"
exit $((fails != 0))
