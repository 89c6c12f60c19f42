"""A FoundationDB home whose fdbserver is another home's with arguments added: the way to start
a cluster through ../shared/fdb/cluster.sh (shared, read-only, with no switch for fdbserver's
options) with knobs or memory settings of the caller's. Used by fdb_fault_test.py and
bench/http/nodes.py."""
import os


def fdb_home_with(parent, real, args):
    """Makes parent/fdb-home: bin/fdbcli and lib are real's, bin/fdbserver runs real's with args
    before its own. Returns its path (cluster.sh's FDB_HOME)."""
    home = os.path.join(parent, "fdb-home")
    os.makedirs(os.path.join(home, "bin"), exist_ok=True)
    for part in ("bin/fdbcli", "lib"):
        if not os.path.lexists(os.path.join(home, part)):
            os.symlink(os.path.join(real, part), os.path.join(home, part))
    server = os.path.join(home, "bin", "fdbserver")
    with open(server, "w") as f:
        f.write(f'#!/bin/sh\nexec {real}/bin/fdbserver {" ".join(args)} "$@"\n')
    os.chmod(server, 0o755)
    return home
