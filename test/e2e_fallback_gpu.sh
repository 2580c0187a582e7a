#!/usr/bin/env bash
# Restore or boot on the GPU machine (docs/DESIGN.md, "Restore or boot"): the
# GPU example ($THAW_GPU_EXAMPLE, as scripts/gpu-run.sh writes it) with its
# snapshot made unrestorable by a changed record (made with a criu that says
# it is 99.0, newer than this host's: the record of what its restore depends
# on says so; the image itself is sound):
#   1. its start restores nothing and boots it: 201, "restored": false naming
#      the difference, its GPUs named, and the instance generates the cold
#      process's tokens ($E2E_GPU_TOKENS, when given);
#   2. one re-snapshot runs on this host; once it is ready, the mark is gone
#      and the start restores (CUDA restore timed), generating the same tokens;
#   3. nothing is left behind.
# Skips (77) without a GPU, or without the GPU example.  scripts/gpu-run.sh
# runs it as the step e2e_fallback_gpu.
set -u
NAME=fallback-gpu
. "${THAW_ROOT:-$PWD}/test/lib/e2e.sh"
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || skip "no GPU"
[ -n "${THAW_GPU_EXAMPLE:-}" ] && [ -f "$THAW_GPU_EXAMPLE" ] ||
	skip "no GPU example (THAW_GPU_EXAMPLE: scripts/gpu-run.sh writes it)"
BODY='{"prompt_ids": [1, 450, 4996, 17354, 1701, 29916], "max_new_tokens": 32}'

tokens() { # ENDPOINT: the tokens it generates for BODY
	curl -sf --max-time 300 -X POST -d "$BODY" "http://$1/generate" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])'
}
ready_again() { # SNAP: another snapshot ready, unmarked
	api GET /functions/gx >/dev/null &&
		[ "$(jget "$T/body" "(j['snapshot']['state'], j['snapshot']['id'] != '$1', j['snapshot']['unrestorable'] is None)")" = "('ready', True, True)" ]
}

cat >"$T/criu99" <<EOF
#!/bin/sh
[ "\$1" = --version ] && { echo "Version: 99.0"; exit 0; }
exec "$CRIU" "\$@"
EOF
chmod +x "$T/criu99"

# The snapshot, its record saying CRIU 99.0.
start_thawd --criu "$T/criu99" --max-standby 0 --ram-tier-bytes 16G
st=$(api PUT /functions/gx -d @"$THAW_GPU_EXAMPLE")
[ "$st" = 201 ] || { fail "PUT gx: $st $(cat "$T/body")"; exit 1; }
st=$(curl -s -o "$T/body" -w '%{http_code}' --max-time 1200 -X POST "$URL/functions/gx/snapshot?wait=1")
[ "$st" = 200 ] || { fail "snapshot of gx: $st $(cat "$T/body")"; exit 1; }
snap=$(jget "$T/body" "j['job']['result']['snapshot']")
stop_thawd 120

# ---- 1. the start boots ----
start_thawd --max-standby 0 --ram-tier-bytes 16G
st=$(curl -s -o "$T/start" -w '%{http_code}' --max-time 1200 -X POST "$URL/functions/gx/start")
echo "start: $(cat "$T/start")"
if [ "$st" = 201 ] && [ "$(jget "$T/start" "j['restored']")" = False ] &&
	jget "$T/start" "j['restore_failure']" | grep -q "older than the 99.0"; then
	ok "the GPU example's start boots: $(jget "$T/start" "j['restore_failure']")"
else
	fail "start of gx: $st $(cat "$T/start")"
fi
echo "figure: e2e_fallback_gpu boot_total_ms $(jget "$T/start" "j['timings_ms']['total']")"
[ -n "$(jget "$T/start" "j.get('gpus')")" ] || fail "the booted instance names no GPU"
toks=$(tokens "$(jget "$T/start" "j['endpoint']")")
echo "booted instance tokens: $toks"
[ -n "$toks" ] || fail "the booted instance generated nothing"
[ -z "${E2E_GPU_TOKENS:-}" ] || [ "$toks" = "$E2E_GPU_TOKENS" ] ||
	fail "the booted instance's tokens differ from the cold process's $E2E_GPU_TOKENS"
api DELETE "/instances/$(jget "$T/start" "j['instance']")" >/dev/null

# ---- 2. the re-snapshot, then restored ----
wait_for 1200 ready_again "$snap" && ok "the re-snapshot is ready, the mark gone" ||
	fail "gx after its re-snapshot: $(cat "$T/body")"
st=$(curl -s -o "$T/start" -w '%{http_code}' --max-time 1200 -X POST "$URL/functions/gx/start")
echo "start: $(cat "$T/start")"
[ "$st" = 201 ] && [ "$(jget "$T/start" "j['restored']")" = True ] &&
	python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)' \
		"$(jget "$T/start" "j['timings_ms']['gpu_restore']")" &&
	ok "the start after the re-snapshot restores" || fail "start of gx after: $st $(cat "$T/start")"
echo "figure: e2e_fallback_gpu restore_total_ms $(jget "$T/start" "j['timings_ms']['total']")"
toks2=$(tokens "$(jget "$T/start" "j['endpoint']")")
[ -n "$toks2" ] && [ "$toks2" = "$toks" ] && ok "the restored instance generates the same tokens" ||
	fail "restored tokens $toks2, booted $toks"
api DELETE "/instances/$(jget "$T/start" "j['instance']")" >/dev/null
stop_thawd 120

# ---- 3. nothing left ----
c=$(own_containers)
[ -z "$c" ] || fail "containers left: $c"
[ -z "$(ls -A "$DATA/instances" 2>/dev/null)" ] || fail "records left: $(ls "$DATA/instances")"
[ $fails = 0 ] && echo "e2e_fallback_gpu: all passed"
exit $fails
