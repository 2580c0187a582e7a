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
cat <<MSG
thawd on http://$LISTEN, data in $DATA.  Register and snapshot the CPU example:

  curl -sX PUT http://$LISTEN/functions/cpu-example -d @bench/functions/cpu_example.json
  curl -sX POST 'http://$LISTEN/functions/cpu-example/snapshot?wait=1'
  curl -sX POST http://$LISTEN/functions/cpu-example/start

MSG
exec "$B/thawd" --listen "$LISTEN" --data-dir "$DATA" --criu "$PWD/.deps/criu-wrapper"
