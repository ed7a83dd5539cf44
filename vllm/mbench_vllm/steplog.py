"""The step log's binary records: layout, and a reader that turns a log
(binary records, JSON text lines, or both) back into the dicts of the
JSONL format.

The engine process writes one fixed-size *step record* per engine step
(``_recorder``), packed on the engine thread into a preallocated ring, so a
step costs no formatting and no allocation, and the flusher thread writes
the ring's bytes as they are. mbench's Go side (``probes``) decodes them;
status lines stay JSON text lines in the same file.

Framing (every record, little-endian): an 8-byte header, then the payload.

    byte 0      0xFF            (never starts a JSON text line: not UTF-8)
    byte 1      kind            'S' step record, 'G' GPU record
    bytes 2-3   u16 version     1
    bytes 4-7   u32 length      payload bytes (a multiple of 8)

A reader takes the fields it knows and skips the rest of the payload, so a
later version may append fields. A text line starts with any other byte
and ends at a newline.

Step record payload (int64 each, ns unless said):

    ts_us       wall-clock µs at the step's end (the flusher converts the
                engine thread's perf_counter_ns with one offset per flush)
    dur         step duration
    schedule, build_meta, execute, update, get_finished, launch, wait
                timer sums; 0 = absent (the hooked call did not run in the
                step; a call that ran always takes >= 1 ns)
    gpu         the line's batch GPU time from CUDA events; 0 = absent
    batch       the batch collected in the step (update/wait/gpu); 0 = none
    running, waiting       scheduler queue lengths; -1 = absent
    total_tokens           scheduled tokens of the step's batch; -1 = absent
    decode_tokens          of which decode tokens
    flags       bit 0: step_with_batch_queue; bit 1: gpu is host-bound
                (below); bits 8-11: the timers whose hooks are applied to
                this engine (schedule, execute, update, launch/wait); a
                timer whose bit is clear is absent
    pid

GPU record payload: ts_us (wall µs when written), batch, gpu (ns), pid,
flags (bit 1: host-bound; absent in records written before it existed) —
the GPU time of a batch whose step record was written before its events
completed (a "GPU line" in the JSONL format).

*Host-bound* (``"gpu_host_bound": 1`` in the JSONL form): the GPU had
reached the forward's start event before the host finished launching the
forward, and the host's launch took more than 5% of the events' span. The
span then holds host time (the GPU waited for launches), so it is an upper
bound of the forward's GPU time, not the GPU time: readers leave it out of
gpu_us. Where the GPU was still behind the host when the launch ended, every
kernel of the forward was queued before the GPU reached the start event, and
the span is the GPU's own; where the launch took at most 5% of the span, the
span is within 5% of it.
"""

from __future__ import annotations

import json
import struct

MARK = 0xFF
KIND_STEP = ord("S")
KIND_GPU = ord("G")
VERSION = 1

# Slots of a step record: the header is slot 0, the payload follows.
(S_HDR, S_TS, S_DUR, S_SCHED, S_META, S_EXEC, S_UPD, S_GF, S_LAUNCH, S_WAIT, S_GPU, S_BATCH,
 S_RUN, S_WAITING, S_TOTAL, S_DEC, S_FLAGS, S_PID) = range(18)
STEP_SLOTS = 18
STEP_BYTES = STEP_SLOTS * 8
GPU_SLOTS = 6

F_BQ = 1
F_GPU_HOST = 2  # the line's gpu is host-bound (an upper bound, not GPU time)
# Hooked-timer bits (flags >> 8).
M_SCHED, M_EXEC, M_UPD, M_LAUNCH = 1, 2, 4, 8


def header(kind: int, payload_bytes: int) -> int:
    """The 8-byte header as the int64 it is when read little-endian."""
    return struct.unpack("<q", bytes((MARK, kind, VERSION, 0)) + payload_bytes.to_bytes(4, "little"))[0]


STEP_HEADER = header(KIND_STEP, STEP_BYTES - 8)
GPU_HEADER = header(KIND_GPU, GPU_SLOTS * 8 - 8)
_GPU = struct.Struct("<" + "q" * GPU_SLOTS)


def pack_gpu(ts_us: int, batch, gpu_ns: int, pid: int, host_bound: bool = False) -> bytes:
    return _GPU.pack(GPU_HEADER, ts_us, batch or 0, gpu_ns, pid, F_GPU_HOST if host_bound else 0)


def step_dict(v) -> dict:
    """The JSONL line of one step record (v: its int64 slots)."""
    flags = v[S_FLAGS]
    bq = flags & F_BQ
    hooked = flags >> 8
    dur = v[S_DUR]
    d = {"ts_us": v[S_TS], "step_duration_us": dur / 1e3}
    acc = 0
    if v[S_SCHED] and hooked & M_SCHED:
        d["schedule_us"] = v[S_SCHED] / 1e3
        acc = v[S_SCHED]
    if v[S_META]:
        d["build_meta_us"] = v[S_META] / 1e3
    if bq:
        if hooked & M_LAUNCH:
            if v[S_LAUNCH]:
                d["launch_us"] = v[S_LAUNCH] / 1e3
                acc += v[S_LAUNCH]
            if v[S_WAIT]:
                d["wait_us"] = v[S_WAIT] / 1e3
                acc += v[S_WAIT]
    elif v[S_EXEC] and hooked & M_EXEC:
        d["execute_us"] = v[S_EXEC] / 1e3
        acc += v[S_EXEC]
    if v[S_UPD] and hooked & M_UPD:
        d["update_us"] = v[S_UPD] / 1e3
        acc += v[S_UPD]
    if v[S_GF]:
        d["get_finished_us"] = v[S_GF] / 1e3
    d["unaccounted_us"] = (dur - acc) / 1e3
    if v[S_GPU]:
        d["gpu_us"] = v[S_GPU] / 1e3
        if flags & F_GPU_HOST:
            d["gpu_host_bound"] = 1
    if v[S_BATCH]:
        d["batch"] = v[S_BATCH]
    if v[S_RUN] >= 0:
        d["num_running"], d["num_waiting"] = v[S_RUN], v[S_WAITING]
    if v[S_TOTAL] >= 0:
        dec = max(0, v[S_DEC])
        d["num_prefill_tokens"], d["num_decode_tokens"] = v[S_TOTAL] - dec, dec
    if bq:
        d["batch_queue"] = 1
    d["pid"] = v[S_PID]
    return d


def read(path: str, errors: list | None = None) -> list[dict]:
    """Every record of a step log as its JSONL dict (steps, status lines,
    GPU lines), in file order. A record that cannot be read raises
    ValueError naming its offset, or, with ``errors`` (a list), is described
    there and skipped."""
    with open(path, "rb") as f:
        data = f.read()
    return decode(data, errors)


def decode(data: bytes, errors: list | None = None) -> list[dict]:
    if errors is None:
        return _decode(data)
    out: list[dict] = []
    i = 0
    while i < len(data):
        try:
            out.extend(_decode(data[i:]))
            break
        except _Bad as bad:
            errors.append(str(bad))
            out.extend(bad.good)
            j = bad.offset + 1  # resync: the next record mark or line
            k = min((x for x in (data.find(b"\n", i + j), data.find(bytes((MARK,)), i + j)) if x >= 0),
                    default=len(data))
            i = k + 1 if k < len(data) and data[k] == 10 else k
    return out


class _Bad(ValueError):
    def __init__(self, msg: str, offset: int, good: list):
        super().__init__(msg)
        self.offset, self.good = offset, good


def _decode(data: bytes) -> list[dict]:
    out: list[dict] = []
    i, n = 0, len(data)
    while i < n:
        if data[i] == MARK:
            if n - i < 8:
                raise _Bad(f"offset {i}: truncated record header", i, out)
            kind, ver, ln = data[i + 1], int.from_bytes(data[i + 2:i + 4], "little"), \
                int.from_bytes(data[i + 4:i + 8], "little")
            if ver < 1 or ln % 8 or n - i - 8 < ln:
                raise _Bad(f"offset {i}: bad or truncated record (kind {kind}, version {ver}, {ln} bytes)", i, out)
            v = struct.unpack_from(f"<{ln // 8}q", data, i + 8)
            if kind == KIND_STEP and len(v) >= STEP_SLOTS - 1:
                out.append(step_dict((STEP_HEADER,) + v))
            elif kind == KIND_GPU and len(v) >= 4:
                d = {"ts_us": v[0], "gpu_us": v[2] / 1e3, "gpu_batch": v[1] or None, "pid": v[3]}
                if len(v) >= 5 and v[4] & F_GPU_HOST:
                    d["gpu_host_bound"] = 1
                out.append(d)
            else:
                raise _Bad(f"offset {i}: unknown record kind {kind} ({ln} bytes)", i, out)
            i += 8 + ln
            continue
        j = data.find(b"\n", i)
        k = data.find(bytes((MARK,)), i, n if j < 0 else j)
        end = n if j < 0 else j
        if k >= 0:
            end = k
        line = data[i:end]
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError as exc:
                raise _Bad(f"offset {i}: not a JSON line: {exc}", i, out) from None
        i = end + 1 if end == j else end
    return out
