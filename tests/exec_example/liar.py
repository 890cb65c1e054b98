"""An exec backend that answers wrongly: `liar.py MODE REQUEST RESPONSE`.

MODE: garbage (bytes that are no Response), shape, dtype, short (too few bytes), extra (an output
not asked for), missing (no output), silent (exit 0, no response file), reject (rejects every
call), zeros (a well-formed all-zero answer).  `liar.py MODE --list-supported` exits 2 (unknown
option: every kernel is tried), except in MODE list-backward, which declares psamask_backward only.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository: gen.core.proto
from gen.core.proto import opcase_pb2 as pb  # noqa: E402

mode = sys.argv[1]
if sys.argv[2:] == ["--list-supported"]:
    if mode == "list-backward":
        print("# only the backward kernel\npsamask_backward float32")
        sys.exit(0)
    print("liar: unknown option --list-supported", file=sys.stderr)
    sys.exit(2)
request_path, response_path = sys.argv[-2:]
print(f"liar: answering in mode {mode}", file=sys.stderr)
request = pb.Case()
request.ParseFromString(Path(request_path).read_bytes())
SIZES = {"float16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8}


def tensor(t, shape=None, dtype=None, nbytes=None):
    shape = list(t.shape) if shape is None else shape
    dtype = dtype or t.dtype
    count = 1
    for s in shape:
        count *= s
    return pb.Tensor(name=t.name, shape=shape, dtype=dtype, layout=t.layout,
                     data=bytes(count * SIZES[dtype] if nbytes is None else nbytes))


response = pb.Response()
if mode == "garbage":
    Path(response_path).write_bytes(b"\xff\xfe not a protobuf \x00\x01")
    sys.exit(0)
if mode == "silent":
    sys.exit(0)
if mode == "reject":
    response.rejected = True
    response.message = "liar: everything is BAD_PARAM"
for t in request.outputs:
    if mode == "shape":
        response.outputs.append(tensor(t, shape=list(t.shape) + [1]))
    elif mode == "dtype":
        response.outputs.append(tensor(t, dtype="float64"))
    elif mode == "short":
        response.outputs.append(tensor(t, nbytes=3))
    elif mode in ("extra", "zeros", "list-backward"):
        response.outputs.append(tensor(t))
if mode == "extra":
    response.outputs.append(pb.Tensor(name="scratch", shape=[1], dtype="float32", data=bytes(4)))
Path(response_path).write_bytes(response.SerializeToString())
