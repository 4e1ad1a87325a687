"""An independent reader of TensorBoard event files for the tests: the
TFRecord framing and its masked CRC32C checked here (CRC32C written below
from its definition, nothing shared with worker/tboard.c), each record
decoded by the classes protoc generates from tb_event_subset.proto (the
published field numbers) with Debian's python3-protobuf.

read_events(path, protoc) returns [(wall_time, step, file_version or None,
{tag: value})] and raises ValueError on any framing or CRC error."""
import importlib
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(blob):
    """The payloads of a TFRecord file's bytes, every CRC checked."""
    out, off = [], 0
    while off < len(blob):
        if len(blob) - off < 12:
            raise ValueError("a truncated record header at byte %d" % off)
        header = blob[off:off + 8]
        (n,) = struct.unpack("<Q", header)
        (lcrc,) = struct.unpack("<I", blob[off + 8:off + 12])
        if lcrc != masked(header):
            raise ValueError("length CRC mismatch at byte %d" % off)
        if len(blob) - off < 16 + n:
            raise ValueError("a truncated record of %d bytes at byte %d" % (n, off))
        payload = blob[off + 12:off + 12 + n]
        (dcrc,) = struct.unpack("<I", blob[off + 12 + n:off + 16 + n])
        if dcrc != masked(payload):
            raise ValueError("data CRC mismatch at byte %d" % off)
        out.append(payload)
        off += 16 + n
    return out


_MODULE = None


def event_class(protoc="protoc"):
    """protoc --python_out of the subset, imported once."""
    global _MODULE
    if _MODULE is None:
        out = tempfile.mkdtemp(prefix="tbproto-")
        subprocess.run([protoc, "--proto_path=" + HERE, "--python_out=" + out, "tb_event_subset.proto"],
                       check=True)
        sys.path.insert(0, out)
        _MODULE = importlib.import_module("tb_event_subset_pb2")
    return _MODULE.Event


def read_events(path, protoc="protoc"):
    Event = event_class(protoc)
    with open(path, "rb") as f:
        blob = f.read()
    out = []
    for payload in records(blob):
        ev = Event()
        ev.ParseFromString(payload)
        which = ev.WhichOneof("what")
        values = {}
        if which == "summary":
            for v in ev.summary.value:
                if v.WhichOneof("value") != "simple_value":
                    raise ValueError("value %r is not a simple_value" % v.tag)
                values[v.tag] = v.simple_value
        out.append((ev.wall_time, ev.step, ev.file_version if which == "file_version" else None, values))
    return out
