#!/usr/bin/env bash
# make run: start thawd on a data directory in the tree (./data), or, before
# thawd exists, report what `thaw doctor` finds.
set -eu
cd "$(dirname "$0")/.."
B=${B:-build}
DATA=${THAW_DATA_DIR:-$PWD/data}
mkdir -p "$DATA"
if [ ! -x "$B/thawd" ]; then
	echo "thawd is not built yet; running thaw doctor"
	exec "$B/thaw" --data-dir "$DATA" doctor
fi
LISTEN=${THAW_LISTEN:-127.0.0.1:8080}
# The example's spec names its directory relatively ("cwd": "."), as `thaw
# snapshot` takes it; over HTTP the cwd must be absolute: write a copy that
# says where the tree is.
SPEC=$DATA/cpu_example.json
python3 -c '
import json, sys
d, out = sys.argv[1], sys.argv[2]
s = json.load(open(d + "/cpu_example.json"))
s["cwd"] = d
json.dump(s, open(out, "w"), indent=1)
' "$PWD/bench/functions" "$SPEC"
cat <<MSG
thawd on http://$LISTEN, data in $DATA.  Register and snapshot the CPU example,
start an instance and ask it (ENDPOINT is the start answer's "endpoint"):

  curl -sX PUT http://$LISTEN/functions/cpu-example -d @$SPEC
  curl -sX POST 'http://$LISTEN/functions/cpu-example/snapshot?wait=1'
  curl -sX POST http://$LISTEN/functions/cpu-example/start
  curl -s 'http://ENDPOINT/infer?x=7'
  curl -s http://$LISTEN/metrics

thawd --help tells its options (a token, limits, the RAM tier).
MSG
exec "$B/thawd" --listen "$LISTEN" --data-dir "$DATA" --criu "$PWD/.deps/criu-wrapper"
