"""Turns the segments and databases make-corpus recorded into the harnesses' seeds.

fuzz_segment_reader: an 8-byte control block (fuzz_segment_reader.cpp: after_open, patch_length,
reserved, position), the patch, then the segment image. Besides the plain segments, the seeds
named review-s8-* reproduce the reliability review's §8: the geometry changed, or the file
shrunk, after the reader validated the header.
fuzz_side_records: the published side records of each segment, back to back.
fuzz_database: each run database, vacuumed to 512-byte pages.
"""
import os
import shutil
import sqlite3
import struct
import sys

# Offsets in SegmentHeader (common/trainshim/protocol.hpp).
HEADER_BYTES_AT, SEGMENT_BYTES_AT, RING_COUNT_AT, FIRST_RING_CAPACITY_AT, RING_CAPACITY_AT, SIDE_CAPACITY_AT = (
    12, 16, 24, 28, 32, 40)
SIDE_KIND_MODULE = 3
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


def compacted(image):
    """The segment with a side ring just big enough for its first two modules and its first
    stacks and strings (a process loads dozens of modules; they would fill every seed)."""
    side_ring, records = side_records(image)
    modules = [r for r in records if struct.unpack_from("<H", r)[0] == SIDE_KIND_MODULE]
    others = [r for r in records if struct.unpack_from("<H", r)[0] != SIDE_KIND_MODULE]
    kept = [r for r in records if r in modules[:2] or r in others[:14]]
    capacity = 1 << (len(kept) - 1).bit_length()
    dropped = image[side_ring + 128 : side_ring + 136]
    control_block = struct.pack("<Q", len(kept)).ljust(128, b"\0") + dropped.ljust(64, b"\0")
    slots = b"".join(struct.pack("<Q", 1) + r for r in kept).ljust(capacity * SIDE_SLOT_BYTES, b"\0")
    header = bytearray(image[:side_ring])
    struct.pack_into("<I", header, SIDE_CAPACITY_AT, capacity)
    struct.pack_into("<Q", header, SEGMENT_BYTES_AT, side_ring + RING_CONTROL_BYTES + len(slots))
    return bytes(header) + control_block + slots, b"".join(kept)


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def main(scratch, corpus):
    for name in sorted(os.listdir(scratch)):
        source = os.path.join(scratch, name)
        stem = name.split(".")[0].removeprefix("fuzzseed_")
        if name.endswith(".segment"):
            image, records = compacted(open(source, "rb").read())
            write(os.path.join(corpus, "fuzz_segment_reader", stem), control(NOTHING) + image)
            write(os.path.join(corpus, "fuzz_side_records", stem), records)
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
        elif name.endswith(".db"):
            db = sqlite3.connect(source)
            db.execute("PRAGMA journal_mode=DELETE")
            db.execute("PRAGMA page_size=512")
            db.execute("VACUUM")
            db.close()
            shutil.copy(source, os.path.join(corpus, "fuzz_database", stem))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
