"""The controller's Raft decoder: what pysyncobj sends decodes, a pickle that would run a command
does not run it, and a zlib bomb stops at the frame cap."""

import os
import pickle
import zlib

import pytest
import pysyncobj.pickle as pysyncobj_pickle
from pysyncobj.node import TCPNode

from quiver_namesrv import raft_wire
from quiver_namesrv.raft_wire import MAX_FRAME, UnsafePickle, _inflate, safe_loads


class RunsCommand:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return os.system, (f"touch {self.path}",)


def test_pysyncobj_messages_commands_and_snapshots_decode():
    node = TCPNode("127.0.0.1:5000")
    for msg in [os.urandom(32), b"", "127.0.0.1:5000",
                {"type": "append_entries", "term": 3, "commit_index": 7, "prevLogIdx": 6, "prevLogTerm": 3,
                 "entries": [(b"\x00" + pysyncobj_pickle.dumps((2, ("C/b", 0, "h:1", ["h:1"]), {})), 7, 3)]},
                {"type": "next_node_idx", "term": 3, "next_node_idx": 8, "success": True},
                ([{}, {"data": {"C/b": {"epoch": 1, "sss": ["h:1"], "members": {"h:1": {"id": 1, "ha": "h:2"}}}}}],
                 (b"x", 7, 3), (b"y", 6, 3), {node})]:
        got = safe_loads(pysyncobj_pickle.dumps(msg))  # protocol 2, as pysyncobj writes them
        if isinstance(msg, tuple):
            assert got[:3] == msg[:3] and [n.address for n in got[3]] == ["127.0.0.1:5000"]
        else:
            assert got == msg


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_a_pickle_that_would_run_a_command_is_refused_unrun(tmp_path, protocol):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"type": "request_vote", "term": RunsCommand(marker)}, protocol=protocol)
    with pytest.raises(UnsafePickle, match="posix.system|os.system|nt.system"):
        safe_loads(payload)
    for name in ("builtins.eval", "subprocess.Popen", "codecs.decode"):  # other ways in, by name
        module, attr = name.rsplit(".", 1)
        with pytest.raises(UnsafePickle):
            safe_loads(b"\x80\x02c" + f"{module}\n{attr}\n".encode() + b"q\x00.")
    # only latin-1 text may become bytes (protocol 2's bytes), no other codec
    with pytest.raises(UnsafePickle):
        safe_loads(b"\x80\x02c_codecs\nencode\nq\x00X\x03\x00\x00\x00abcX\x04\x00\x00\x00zlibq\x01\x86q\x02Rq\x03.")
    assert not marker.exists()


def test_install_routes_pysyncobj_decoding_through_the_restricted_decoder(tmp_path):
    raft_wire.install()
    marker = tmp_path / "pwned"
    with pytest.raises(UnsafePickle):
        pysyncobj_pickle.loads(pickle.dumps(RunsCommand(marker), protocol=2))
    assert not marker.exists()


def test_decompression_stops_at_the_frame_cap():
    assert _inflate(zlib.compress(b"a" * 1000)) == b"a" * 1000
    with pytest.raises(ValueError, match="inflates past"):
        _inflate(zlib.compress(b"\0" * (MAX_FRAME + 1), 9))
