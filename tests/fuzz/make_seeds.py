"""Turns the segments and databases make-corpus recorded into the harnesses' seeds.

fuzz_segment_reader: an 8-byte control block (fuzz_segment_reader.cpp: after_open, patch_length,
reserved, position), the patch, then the segment image. Besides the plain segments, the seeds
named review-s8-* reproduce the reliability review's §8: the geometry changed, or the file
shrunk, after the reader validated the header.
fuzz_side_records: the published side records of each segment, back to back.
fuzz_database: each run database, vacuumed to 512-byte pages.

The seeds named gpu* carry the GPU timeline (segment format 8): `gpu` is the native segment with
its ring's records turned into the GPU activity records the shim writes from CUPTI's (kernels
named by a String side record, a pageable copy, a memset), its timeline on and CUPTI's drop count
set; the `gpu` database is the native run's with `gpu_activities` rows and their kernel names.

The seeds named sampler carry the sampler (segment format 9): `sampler` is the Python segment with
its ring's records turned into the sampler's thread samples (the main thread in a Python stack of
the segment, a second thread running) and process samples, its setup facts as a Facts side
record, its sampler on with torn samples counted; the `sampler` database is the Python run's with
`samples`, `threads_now` and `process_facts` rows and a `no_progress` hang.
"""
import os
import shutil
import sqlite3
import struct
import sys
from contextlib import closing

# Offsets in SegmentHeader (common/trainshim/protocol.hpp).
HEADER_BYTES_AT, SEGMENT_BYTES_AT, RING_COUNT_AT, FIRST_RING_CAPACITY_AT, RING_CAPACITY_AT, SIDE_CAPACITY_AT = (
    12, 16, 24, 28, 32, 40)
GPU_TIMELINE_AT, GPU_RECORDS_DROPPED_AT = 576, 584
GPU_TIMELINE_ON = 1
PID_AT, SAMPLER_AT, SAMPLE_HZ_AT, SAMPLES_TORN_AT = 48, 592, 596, 600
SAMPLER_ON = 1
SIDE_KIND_PYTHON_STACK, SIDE_KIND_MODULE, SIDE_KIND_STRING, SIDE_KIND_FACTS = 2, 3, 4, 5
FUTEX, POLL = 202, 7
FACTS = ("affinity=0-15\ncpus_online=0-31\ndevice=0\ngpus=8\ngpu_pci_bus_id=0000:3b:00.0\ngpu_numa_node=0\n"
         "gpu_numa_cpus=0-15\nenv.OMP_NUM_THREADS=4\nenv.NCCL_P2P_DISABLE=1\n")
# EventRecord: begin/end ticks, bytes, stream, object, detail; tid, native and Python stacks,
# result, rank_in_comm, comm_size; api, direction, host_memory; sequence, peer, flags.
EVENT_RECORD = struct.Struct("<QQQQQQIIIiIIHBBIII")
DIRECTION_H2D, HOST_MEMORY_PAGEABLE = 1, 2
KERNEL_NAMES = ["ampere_sgemm_128x64_nn", "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32"]
RING_CONTROL_BYTES, SLOT_BYTES, SIDE_SLOT_BYTES, SIDE_RECORD_BYTES = 192, 96, 1032, 1024
NOTHING, CHANGE, TRUNCATE = 0, 1, 2


def control(after_open, patch=b"", position=0):
    return struct.pack("<BBHI", after_open, len(patch), 0, position) + patch


def u32(image, at):
    return struct.unpack_from("<I", image, at)[0]


def side_records(image):
    rings, first, capacity = u32(image, RING_COUNT_AT), u32(image, FIRST_RING_CAPACITY_AT), u32(image, RING_CAPACITY_AT)
    side_ring = (u32(image, HEADER_BYTES_AT) + RING_CONTROL_BYTES + first * SLOT_BYTES +
                 (rings - 1) * (RING_CONTROL_BYTES + capacity * SLOT_BYTES))
    records = []
    for slot in range(u32(image, SIDE_CAPACITY_AT)):
        at = side_ring + RING_CONTROL_BYTES + slot * SIDE_SLOT_BYTES
        if struct.unpack_from("<Q", image, at)[0] & 1:  # odd state: the slot holds a record
            records.append(image[at + 8 : at + 8 + SIDE_RECORD_BYTES])
    return side_ring, records


def compacted(image, extra_side_records=()):
    """The segment with a side ring just big enough for its first two modules and its first
    stacks and strings (a process loads dozens of modules; they would fill every seed), and
    `extra_side_records` after them."""
    side_ring, records = side_records(image)
    modules = [r for r in records if struct.unpack_from("<H", r)[0] == SIDE_KIND_MODULE]
    others = [r for r in records if struct.unpack_from("<H", r)[0] != SIDE_KIND_MODULE]
    kept = [r for r in records if r in modules[:2] or r in others[:14]] + list(extra_side_records)
    capacity = 1 << (len(kept) - 1).bit_length()
    dropped = image[side_ring + 128 : side_ring + 136]
    control_block = struct.pack("<Q", len(kept)).ljust(128, b"\0") + dropped.ljust(64, b"\0")
    slots = b"".join(struct.pack("<Q", 1) + r for r in kept).ljust(capacity * SIDE_SLOT_BYTES, b"\0")
    header = bytearray(image[:side_ring])
    struct.pack_into("<I", header, SIDE_CAPACITY_AT, capacity)
    struct.pack_into("<Q", header, SEGMENT_BYTES_AT, side_ring + RING_CONTROL_BYTES + len(slots))
    return bytes(header) + control_block + slots, b"".join(kept)


def string_ids(records):
    return [struct.unpack_from("<I", r, 4)[0] for r in records if struct.unpack_from("<H", r)[0] == SIDE_KIND_STRING]


def string_record(string_id, text):
    data = text.encode()
    return struct.pack("<HHIQ", SIDE_KIND_STRING, len(data), string_id, 0) + data.ljust(SIDE_RECORD_BYTES - 16, b"\0")


def with_gpu_timeline(image, apis):
    """The segment with the shim's GPU activity records in place of its ring's, their kernel
    names published as String side records (new ids of the process's one String numbering)."""
    _, records = side_records(image)
    first_id = max(string_ids(records), default=0) + 1
    names = [string_record(first_id + i, text) for i, text in enumerate(KERNEL_NAMES)]
    image, _ = compacted(image, names)
    image = bytearray(image)
    struct.pack_into("<I", image, GPU_TIMELINE_AT, GPU_TIMELINE_ON)
    struct.pack_into("<Q", image, GPU_RECORDS_DROPPED_AT, 3)
    ring = u32(image, HEADER_BYTES_AT)
    # Begins at the first record's own clock reading: the GPU ran what the host enqueued.
    slot = ring + RING_CONTROL_BYTES
    tid, start = struct.unpack_from("<I", image, slot + 8 + 48)[0], struct.unpack_from("<Q", image, slot + 8)[0]
    for i in range(u32(image, FIRST_RING_CAPACITY_AT)):
        at = ring + RING_CONTROL_BYTES + i * SLOT_BYTES
        if not struct.unpack_from("<Q", image, at)[0] & 1:
            continue
        begin, end = start + i * 10_000, start + i * 10_000 + 8_000
        correlation, device, stream = 100 + i, 0, 7
        if i % 4 == 2:
            fields = (begin, end, 1 << 20, stream, correlation, 0, tid, 0, 0, 0, 0, 0, apis["gpuMemcpy"],
                      DIRECTION_H2D, HOST_MEMORY_PAGEABLE, device, 0, 0)
        elif i % 4 == 3:
            fields = (begin, end, 4096, stream, correlation, 0, tid, 0, 0, 0, 0, 0, apis["gpuMemset"], 0, 0, device, 0, 0)
        else:
            name = first_id + i % len(KERNEL_NAMES)
            fields = (begin, end, 0, stream, correlation, name, tid, 0, 0, 0, 0, 0, apis["gpuKernel"], 0, 0, device, 0, 0)
        EVENT_RECORD.pack_into(image, at + 8, *fields)
    return bytes(image), names


def facts_record(record_id, text):
    data = text.encode()
    return struct.pack("<HHIQ", SIDE_KIND_FACTS, len(data), record_id, 0) + data.ljust(SIDE_RECORD_BYTES - 16, b"\0")


def with_sampler(image, apis):
    """The segment with the sampler's records in place of its ring's: thread samples of its main
    thread (in the segment's first Python stack, sleeping in futex) and of a second thread
    (running), a process sample every eighth; its setup facts as a Facts side record."""
    _, records = side_records(image)
    stacks = [struct.unpack_from("<I", r, 4)[0] for r in records if struct.unpack_from("<H", r)[0] == SIDE_KIND_PYTHON_STACK]
    stack = stacks[0] if stacks else 0
    facts = facts_record(1, FACTS)
    image, _ = compacted(image, [facts])
    image = bytearray(image)
    struct.pack_into("<II", image, SAMPLER_AT, SAMPLER_ON, 50)
    struct.pack_into("<Q", image, SAMPLES_TORN_AT, 2)
    main = u32(image, PID_AT)
    ring = u32(image, HEADER_BYTES_AT)
    slot = ring + RING_CONTROL_BYTES
    start = struct.unpack_from("<Q", image, slot + 8)[0]
    for i in range(u32(image, FIRST_RING_CAPACITY_AT)):
        at = ring + RING_CONTROL_BYTES + i * SLOT_BYTES
        if not struct.unpack_from("<Q", image, at)[0] & 1:
            continue
        begin = start + i * 10_000_000
        if i % 8 == 7:
            # threads, DataLoader workers alive, their CPU time, workers seen, other children
            fields = (begin, begin + 30_000, 6, 0, 2, 40_000_000, main, 0, 0, 0, 1, 0, apis["processSample"], 0, 0, 2,
                      0, 0)
        elif i % 2 == 0:
            fields = (begin, begin + 20_000, 0, 0, ord("S"), FUTEX + 1, main, 0, stack, 0, 0, 0, apis["threadSample"],
                      0, 0, i // 2 + 1, 0, 0)
        else:
            fields = (begin, begin + 20_000, 0, 0, ord("R"), 0, main + 1, 0, 0, 0, 0, 0, apis["threadSample"], 0, 0,
                      i // 2 + 1, 0, 0)
        EVENT_RECORD.pack_into(image, at + 8, *fields)
    return bytes(image), facts


def with_samples(db):
    """A run database with the sampler's rows for its first process: samples of its main thread
    (in its first Python stack) and of a second thread, their threads_now rows, its census and
    setup facts, and a no_progress hang naming its stack."""
    process, pid, rank = db.execute("SELECT id, pid, rank FROM processes ORDER BY id LIMIT 1").fetchone()
    begin = db.execute("SELECT min(first_begin_ns) FROM calls WHERE process_id = ?", (process,)).fetchone()[0]
    stack = db.execute("SELECT coalesce(min(stack_id), 0) FROM python_frames WHERE process_id = ?",
                       (process,)).fetchone()[0]
    for i in range(12):
        at = begin + i * 20_000_000
        db.execute("INSERT INTO samples (process_id, tid, at_ns, tick, state, syscall, python_stack) "
                   "VALUES (?, ?, ?, ?, 'S', ?, ?)", (process, pid, at, i + 1, FUTEX, stack))
        db.execute("INSERT INTO samples (process_id, tid, at_ns, tick, state, syscall, python_stack) "
                   "VALUES (?, ?, ?, ?, 'R', -1, 0)", (process, pid + 1, at + 5_000, i + 1))
    last = begin + 11 * 20_000_000
    db.execute("INSERT INTO threads_now (process_id, tid, at_ns, at_unix_ns, state, syscall, python_stack, since_ns) "
               "VALUES (?, ?, ?, ?, 'S', ?, ?, ?)", (process, pid, last, 1_700_000_000_000_000_000, FUTEX, stack, begin))
    db.execute("INSERT INTO threads_now (process_id, tid, at_ns, at_unix_ns, state, syscall, python_stack, since_ns) "
               "VALUES (?, ?, ?, ?, 'R', -1, 0, ?)", (process, pid + 1, last + 5_000, 1_700_000_000_000_005_000, last))
    facts = [line.split("=", 1) for line in FACTS.splitlines()]
    facts += [["threads", "6"], ["threads_max", "7"], ["workers", "2"], ["workers_max", "2"], ["workers_seen", "4"],
              ["workers_cpu_ns", "40000000"], ["other_children", "1"]]
    db.executemany("INSERT INTO process_facts (process_id, key, value) VALUES (?, ?, ?)",
                   [(process, key, value) for key, value in facts])
    db.execute("UPDATE processes SET sampler = 'on', sample_hz = 50, samples_torn = 2, samples_not_kept = 1 "
               "WHERE id = ?", (process,))
    db.execute("INSERT INTO hangs (communicator, sequence, kind, op, waiting_ranks, missing_ranks, waited_ns, message, "
               "stacks, detected_unix) VALUES ('', 0, 'no_progress', '', ?, '', 125000000000, ?, ?, 1700000000)",
               (str(rank), f"no rank progressed for 125 s and no collective is pending: rank {rank} main thread "
                           "sleeping in futex for 125 s",
                f"rank {rank} (pid {pid}) thread {pid} sleeping in futex for 125 s"))
    db.commit()


def with_gpu_activities(db, apis):
    """A run database with the GPU timeline of its first process: rows of gpu_activities and
    their kernel names, its timeline on, records CUPTI dropped and records not kept."""
    process = db.execute("SELECT min(id) FROM processes").fetchone()[0]
    begin = db.execute("SELECT min(first_begin_ns) FROM calls WHERE process_id = ?", (process,)).fetchone()[0]
    first_id = db.execute("SELECT coalesce(max(id), 0) + 1 FROM python_strings WHERE process_id = ?",
                          (process,)).fetchone()[0]
    for i, text in enumerate(KERNEL_NAMES):
        db.execute("INSERT INTO python_strings (process_id, id, text) VALUES (?, ?, ?)", (process, first_id + i, text))
    for i in range(12):
        start = begin + i * 100_000
        api, nbytes, direction, memory, name = apis["gpuKernel"], 0, 0, 0, first_id + i % len(KERNEL_NAMES)
        if i % 4 == 2:
            api, nbytes, direction, memory, name = apis["gpuMemcpy"], 1 << 20, DIRECTION_H2D, HOST_MEMORY_PAGEABLE, 0
        db.execute("INSERT INTO gpu_activities (process_id, api, start_ns, end_ns, device, stream, bytes, direction, "
                   "host_memory, name, correlation) VALUES (?, ?, ?, ?, 0, 7, ?, ?, ?, ?, ?)",
                   (process, api, start, start + 80_000, nbytes, direction, memory, name, 100 + i))
    db.execute("UPDATE processes SET gpu_timeline = 'on', gpu_records_dropped = 3, gpu_records_not_kept = 2 "
               "WHERE id = ?", (process,))
    db.commit()


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def vacuumed(path):
    """The database's bytes with 512-byte pages, in one file."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("PRAGMA page_size=512")
    db.execute("VACUUM")
    db.close()
    return open(path, "rb").read()


def main(scratch, corpus):
    # The records' api numbers as this build has them (api.def), from a run database.
    with closing(sqlite3.connect(os.path.join(scratch, "native.db"))) as db:
        apis = dict(db.execute("SELECT name, id FROM apis"))
    for name in sorted(os.listdir(scratch)):
        source = os.path.join(scratch, name)
        stem = name.split(".")[0].removeprefix("fuzzseed_")
        if name.endswith(".segment"):
            image, records = compacted(open(source, "rb").read())
            write(os.path.join(corpus, "fuzz_segment_reader", stem), control(NOTHING) + image)
            write(os.path.join(corpus, "fuzz_side_records", stem), records)
            if stem == "python":
                sampler_image, facts = with_sampler(open(source, "rb").read(), apis)
                write(os.path.join(corpus, "fuzz_segment_reader", "sampler"), control(NOTHING) + sampler_image)
                write(os.path.join(corpus, "fuzz_side_records", "sampler"), facts)
            if stem == "native":
                seeds = os.path.join(corpus, "fuzz_segment_reader")
                write(os.path.join(seeds, "review-s8-geometry-ring-count"),
                      control(CHANGE, struct.pack("<I", 0xFFFFFFFF), RING_COUNT_AT) + image)
                write(os.path.join(seeds, "review-s8-geometry-ring-capacity"),
                      control(CHANGE, struct.pack("<I", 1 << 22), RING_CAPACITY_AT) + image)
                write(os.path.join(seeds, "review-s8-geometry-first-ring-capacity"),
                      control(CHANGE, struct.pack("<I", 1 << 22), FIRST_RING_CAPACITY_AT) + image)
                write(os.path.join(seeds, "review-s8-truncate-rings"), control(TRUNCATE, position=4096) + image)
                write(os.path.join(seeds, "review-s8-truncate-header"), control(TRUNCATE, position=0) + image)
                gpu_image, names = with_gpu_timeline(open(source, "rb").read(), apis)
                write(os.path.join(seeds, "gpu"), control(NOTHING) + gpu_image)
                write(os.path.join(corpus, "fuzz_side_records", "gpu"), b"".join(names))
        elif name.endswith(".db"):
            if stem == "native":
                gpu = os.path.join(scratch, "gpu.dbseed")
                shutil.copy(source, gpu)
                with closing(sqlite3.connect(gpu)) as db:
                    with_gpu_activities(db, apis)
                write(os.path.join(corpus, "fuzz_database", "gpu"), vacuumed(gpu))
            if stem == "python":
                sampled = os.path.join(scratch, "sampler.dbseed")
                shutil.copy(source, sampled)
                with closing(sqlite3.connect(sampled)) as db:
                    with_samples(db)
                write(os.path.join(corpus, "fuzz_database", "sampler"), vacuumed(sampled))
            write(os.path.join(corpus, "fuzz_database", stem), vacuumed(source))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
