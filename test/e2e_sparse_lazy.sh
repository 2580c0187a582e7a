#!/usr/bin/env bash
# e2e_sparse_lazy: e2e_sparse.sh with every instance restored lazily (thaw's
# lazy-pages daemon serving the elided image): the elided pages must read as zero
# when the daemon is asked for them (it answers pages no pagemap entry holds
# with zeros), and everything else as before.
exec env RESTORE_ARGS=--lazy bash "$(dirname "$0")/e2e_sparse.sh" "$@"
