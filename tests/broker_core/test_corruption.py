"""Damaged storage: torn tails, flipped bytes, lost indexes, crashes in cleanup and roll.

Each test damages the files of a closed store the way a fault would and checks what
opening it does under both ``on_corrupt`` policies: a torn tail is cut; damage that valid
records follow refuses the start ("refuse") or is stepped over and reported ("skip");
a damaged record is never served.
"""

from __future__ import annotations

import logging
import random
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from broker_core import Message, MessageStore, StoreConfig, StoreError
from broker_core.commit_log import ScanStop, segment_name
from broker_core.errors import CorruptRecord
from broker_core.record import Record, encode_record
from cli.main import main as lmq_cli

SMALL = StoreConfig(segment_bytes=256 * 1024, max_message_bytes=64 * 1024)
SKIP = StoreConfig(segment_bytes=256 * 1024, max_message_bytes=64 * 1024, on_corrupt="skip")
TINY_SEGMENTS = StoreConfig(segment_bytes=64 * 1024, max_message_bytes=16 * 1024)
NAMES = [f"lmq/{i}" for i in range(6)]


def fill(s: MessageStore, n: int, seed: int, body: int = 300) -> None:
    rnd = random.Random(seed)
    for i in range(n):
        targets = rnd.sample(NAMES, rnd.randint(1, 3))
        s.append(Message(topic=f"t/{seed}/{i}", body=rnd.randbytes(body)), targets, wait=False)


def records(s: MessageStore, start: int | None = None) -> list[Record]:
    out = [r for r in s.log.scan(start) if not isinstance(r, ScanStop)]
    return out


def segment_of(data: Path, position: int) -> tuple[Path, int]:
    """The segment file holding ``position`` and the byte in it."""
    bases = sorted(int(p.stem) for p in (data / "commitlog").glob("*.log"))
    base = max(b for b in bases if b <= position)
    return data / "commitlog" / segment_name(base), position - base


def flip(data: Path, position: int) -> None:
    path, at = segment_of(data, position)
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x5A]))


def log_bytes(data: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((data / "commitlog").glob("*.log"))}


def undispatched_tail(data: Path, cfg: StoreConfig, before: int, after: int) -> list[Record]:
    """A store whose last ``after`` records are in the log but not in the index, as after
    a crash between the log write and the index write (the index is put back to what it
    was before they were appended). Returns those records."""
    with MessageStore.open(data, cfg) as s:
        fill(s, before, seed=1)
        checkpoint = s.log.end
    shutil.copytree(data / "index", data.parent / "index.saved")
    with MessageStore.open(data, cfg) as s:
        fill(s, after, seed=2)
        tail = records(s, checkpoint)
    shutil.rmtree(data / "index")
    shutil.move(data.parent / "index.saved", data / "index")
    assert len(tail) == after
    return tail


def assert_readable(s: MessageStore, recs: list[Record]) -> None:
    """Every dispatch pair of ``recs`` reads back as that record."""
    for rec in recs:
        for name, offset in rec.dispatch:
            got = s.read_at(name, offset)
            assert got is not None, (name, offset)
            assert got.record.position == rec.position and got.body == rec.body


# -- the option -----------------------------------------------------------------------


def test_on_corrupt_accepts_refuse_or_skip_only():
    assert StoreConfig().on_corrupt == "refuse"
    with pytest.raises(ValueError, match="on_corrupt must be 'refuse' or 'skip'"):
        StoreConfig(on_corrupt="ignore")


# -- a flipped byte in an old (dispatched) record -------------------------------------


@pytest.mark.parametrize("cfg", [SMALL, SKIP], ids=["refuse", "skip"])
def test_flipped_byte_in_an_old_record_is_never_served(tmp_path, cfg):
    data = tmp_path / "data"
    with MessageStore.open(data, cfg) as s:
        fill(s, 40, seed=3)
        victim = s.pull("lmq/1", 0, max_count=100).messages[2]
        later = s.pull("lmq/1", victim.offset + 1, max_count=100).messages
        others = {n: len(s.pull(n, 0, max_count=100).messages) for n in NAMES}
    flip(data, victim.record.position + 60)  # a byte of the topic/body, not the header
    with MessageStore.open(data, cfg) as s:
        # before the checkpoint: recovery does not re-read it, the start succeeds
        assert not s.recovery.skipped and not s.recovery.truncated_bytes
        if cfg.on_corrupt == "refuse":
            with pytest.raises(CorruptRecord, match="CRC mismatch"):
                s.pull("lmq/1", 0, max_count=100)
            with pytest.raises(CorruptRecord, match="CRC mismatch"):
                s.pull("lmq/1", victim.offset, max_count=1)
        else:  # "skip": stepped over, counted and logged; everything else is served
            served = s.pull("lmq/1", 0, max_count=100)
            assert victim.offset not in [m.offset for m in served.messages]
            assert len(served.messages) == victim.offset + len(later)
            assert s.corrupt_reads == 1
        with pytest.raises(CorruptRecord):
            s.read_at("lmq/1", victim.offset)
        # the records after it are served, intact
        got = s.pull("lmq/1", victim.offset + 1, max_count=100).messages
        assert [m.body for m in got] == [m.body for m in later]
        # the LMQs that do not hold it are unaffected
        for name in NAMES:
            if name not in dict(victim.record.dispatch):
                assert len(s.pull(name, 0, max_count=100).messages) == others[name]
        report = s.verify()
        assert not report.ok
        assert f"damaged bytes at {victim.record.position}" in report.problems[0]
        assert "CRC mismatch" in report.problems[0]
        assert report.records == 39  # the walk went on past the damage
    # `lmq store verify` says so too, in one line per problem and a failing exit code
    result = CliRunner().invoke(lmq_cli, ["store", "verify", "--data-dir", str(data)])
    assert result.exit_code == 1
    assert f"problem: damaged bytes at {victim.record.position}" in result.output
    assert "00000000000000000000.log" in result.output and "Traceback" not in result.output


# -- damage after the checkpoint that valid records follow -----------------------------


def test_damage_mid_tail_refuses_the_start_and_leaves_the_log(tmp_path):
    data = tmp_path / "data"
    tail = undispatched_tail(data, SMALL, before=30, after=20)
    victim = tail[8]
    flip(data, victim.position + 70)
    before = log_bytes(data)
    with pytest.raises(StoreError) as info:
        MessageStore.open(data, SMALL)
    text = str(info.value)
    path, at = segment_of(data, victim.position)
    assert f"damaged at {victim.position} (segment {path.name}, byte {at})" in text
    assert "CRC mismatch" in text
    assert "lmq store verify" in text and 'on_corrupt = "skip"' in text
    assert log_bytes(data) == before  # nothing was cut off
    # the refusal is stable: a second attempt says the same, the store is not locked
    with pytest.raises(StoreError, match="not a torn write"):
        MessageStore.open(data, SMALL)


def test_damage_mid_tail_is_skipped_and_reported(tmp_path, caplog):
    data = tmp_path / "data"
    tail = undispatched_tail(data, SKIP, before=30, after=20)
    victim = tail[8]
    flip(data, victim.position + 70)
    with caplog.at_level(logging.WARNING, logger="broker_core.recovery"):
        s = MessageStore.open(data, SKIP)
    with s:
        rep = s.recovery
        assert len(rep.skipped) == 1
        assert rep.skipped[0].position == victim.position
        assert rep.skipped[0].bytes == rep.skipped_bytes == victim.size
        assert "CRC mismatch" in rep.skipped[0].reason
        assert f"skipped {victim.size} damaged bytes at {victim.position}" in rep.summary()
        assert rep.replayed_records == 19 and not rep.truncated_bytes
        assert f"skipped {victim.size} damaged bytes" in caplog.text
        assert_readable(s, tail[:8] + tail[9:])
        for name, offset in victim.dispatch:  # its entries are not in the index
            assert s.index.entry(s.index.lookup_id(name.encode()), offset) is None
        # pulls step over the hole and never return the damaged record
        for name in NAMES:
            for m in s.pull(name, 0, max_count=1000).messages:
                assert m.record.position != victim.position
        # verify still shows the damage (it is in the log), and nothing else
        report = s.verify()
        assert len(report.problems) == 1 and "damaged bytes" in report.problems[0]
        # the index rebuild steps over it the same way
        assert len(s.rebuild_index().skipped) == 1
        r = s.append(Message(topic="after", body=b"x"), ["lmq/0"])
        assert r.position == tail[-1].next_position
    with MessageStore.open(data, SKIP) as s:  # once skipped, the next start is clean
        assert not s.recovery.skipped and s.recovery.replayed_records == 0


def test_a_flipped_size_field_is_damage_not_a_torn_tail(tmp_path):
    """A size that claims more than the segment holds looks like a torn write; the valid
    records after it prove otherwise, and they are not cut off."""
    data = tmp_path / "data"
    tail = undispatched_tail(data, SMALL, before=10, after=20)
    victim = tail[5]
    path, at = segment_of(data, victim.position)
    with open(path, "r+b") as f:
        f.seek(at + 1)  # the second byte of the big-endian size: +N * 64 KiB
        f.write(b"\x7f")
    before = log_bytes(data)
    with pytest.raises(StoreError, match="not a torn write"):
        MessageStore.open(data, SMALL)
    assert log_bytes(data) == before
    with MessageStore.open(data, SKIP) as s:
        assert [r.position for r in s.recovery.skipped] == [victim.position]
        assert_readable(s, tail[6:])


def test_damage_in_a_non_last_segment(tmp_path):
    """The checkpoint in the first segment, damage in the last record of a later
    segment that is not the last one: old recovery cut off every segment after it."""
    cfg = TINY_SEGMENTS
    skip = StoreConfig(
        segment_bytes=cfg.segment_bytes, max_message_bytes=16 * 1024, on_corrupt="skip"
    )
    data = tmp_path / "data"
    tail = undispatched_tail(data, cfg, before=5, after=400)
    bases = sorted(int(p.stem) for p in (data / "commitlog").glob("*.log"))
    assert len(bases) >= 3
    victim = next(r for r in tail if r.next_position == bases[2])  # ends segment 1
    flip(data, victim.position + 60)
    before = log_bytes(data)
    with pytest.raises(StoreError, match=f"segment {segment_name(bases[1])}"):
        MessageStore.open(data, cfg)
    assert log_bytes(data) == before
    with MessageStore.open(data, skip) as s:
        (skipped,) = s.recovery.skipped
        assert skipped.position == victim.position and skipped.bytes == victim.size
        assert s.log.end == tail[-1].next_position
        assert len(s.log.segments()) == len(bases)
        assert_readable(s, [r for r in tail if r.position != victim.position])


def test_several_damaged_records_are_each_reported(tmp_path):
    data = tmp_path / "data"
    tail = undispatched_tail(data, SKIP, before=5, after=30)
    for victim in (tail[3], tail[4], tail[20]):  # two adjacent, one apart
        flip(data, victim.position + 58)
    with MessageStore.open(data, SKIP) as s:
        got = [(r.position, r.bytes) for r in s.recovery.skipped]
        assert got == [
            (tail[3].position, tail[3].size + tail[4].size),
            (tail[20].position, tail[20].size),
        ]
        assert_readable(s, tail[:3] + tail[5:20] + tail[21:])


# -- torn tails: cut in both modes ----------------------------------------------------


@pytest.mark.parametrize("cfg", [SMALL, SKIP], ids=["refuse", "skip"])
def test_torn_tail_is_cut_in_both_modes(tmp_path, cfg):
    """Incomplete last records (cut at a spread of byte positions), a zero-filled tail (a
    file extended but its pages never written) and a complete last record with a bad CRC
    (nothing valid after it) are all cut off, keeping every LMQ's offsets."""
    base = tmp_path / "base"
    with MessageStore.open(base, cfg) as s:
        fill(s, 25, seed=4)
        end = s.log.end
        seg = s.log.segments()[-1].path.name
        offsets = {i.name: i.max_offset for i in s.lmqs()}
    torn = encode_record(
        position=end,
        store_ms=1,
        message=Message(topic="torn", body=b"b" * 200),
        dispatch=[(b"lmq/0", offsets["lmq/0"]), (b"lmq/1", offsets["lmq/1"])],
    )
    bad_crc = bytearray(torn)
    bad_crc[100] ^= 1
    tails = [torn[:cut] for cut in (1, 7, 8, 12, 55, 56, 57, len(torn) // 2, len(torn) - 1)]
    tails += [bytes(4096), bytes(bad_crc), bytes(bad_crc) + torn[:30]]
    for i, garbage in enumerate(tails):
        work = tmp_path / f"w{i}"
        shutil.copytree(base, work)
        with open(work / "commitlog" / seg, "ab") as f:
            f.write(garbage)
        with MessageStore.open(work, cfg) as s:
            assert s.log.end == end, i
            assert s.recovery.truncated_bytes == len(garbage) and not s.recovery.skipped
            assert {i.name: i.max_offset for i in s.lmqs()} == offsets
            assert s.verify().ok
        shutil.rmtree(work)


# -- a lost index, with and without damage ---------------------------------------------


def test_lost_index_with_a_damaged_old_record(tmp_path):
    """Without an index the whole log is replayed, old records included: damage in one
    of them refuses the start, or is stepped over with "skip"."""
    data = tmp_path / "data"
    with MessageStore.open(data, SMALL) as s:
        fill(s, 60, seed=5)
        recs = records(s)
    victim = recs[20]
    flip(data, victim.position + 60)
    shutil.rmtree(data / "index")
    with pytest.raises(StoreError, match=f"damaged at {victim.position}"):
        MessageStore.open(data, SMALL)
    shutil.rmtree(data / "index", ignore_errors=True)
    with MessageStore.open(data, SKIP) as s:
        assert s.recovery.index_rebuilt
        assert [r.position for r in s.recovery.skipped] == [victim.position]
        assert_readable(s, recs[:20] + recs[21:])


def test_rebuild_index_refuses_damage_unless_skip(tmp_path):
    data = tmp_path / "data"
    with MessageStore.open(data, SMALL) as s:
        fill(s, 30, seed=6)
        recs = records(s)
    flip(data, recs[-1].position + 60)  # the very last record: damage, not a torn tail
    with MessageStore.open(data, SMALL) as s:
        with pytest.raises(StoreError, match="rebuilding the index: the commit log is dam"):
            s.rebuild_index()
    # The refused rebuild indexed up to the damage; with nothing valid after it, the
    # damaged last record is now a tail like a torn one, and the next open cuts it.
    with MessageStore.open(data, SMALL) as s:
        assert s.recovery.truncated_at == recs[-1].position
        assert_readable(s, recs[:-1])
        assert s.verify().ok
    data2 = tmp_path / "data2"
    with MessageStore.open(data2, SKIP) as s:
        fill(s, 30, seed=6)
        recs = records(s)
    flip(data2, recs[10].position + 60)
    with MessageStore.open(data2, SKIP) as s:
        report = s.rebuild_index()
        assert [r.position for r in report.skipped] == [recs[10].position]
        assert report.replayed_records == 29
        assert_readable(s, recs[:10] + recs[11:])


# -- crashes during cleanup -----------------------------------------------------------


def test_crash_during_retention_is_finished_on_open(tmp_path):
    """Retention unlinked the oldest segment, then the process died before the index
    was trimmed: the open trims it, and no LMQ offset moves backwards."""
    data = tmp_path / "data"
    with MessageStore.open(data, TINY_SEGMENTS) as s:
        fill(s, 300, seed=7)
        first = s.log.segments()[0]
        before = {i.name: i.max_offset for i in s.lmqs()}
    first.path.unlink()
    with MessageStore.open(data, TINY_SEGMENTS) as s:
        assert s.recovery.trimmed_entries > 0
        assert {i.name: i.max_offset for i in s.lmqs()} == before
        for info in s.lmqs():
            assert info.min_offset > 0 or s.lmq(info.name).messages == info.max_offset
            got = s.pull(info.name, 0, max_count=1000).messages
            assert got and got[0].offset == info.min_offset
        assert s.verify().ok


def test_crash_during_lmq_removal_is_finished_on_open(tmp_path):
    """The removal record reached the log, the index and state deletes did not."""
    data = tmp_path / "data"
    with MessageStore.open(data, SMALL) as s:
        fill(s, 50, seed=8)
        s.commit_offset("g", "lmq/2", 3)
    for d in ("index", "state"):
        shutil.copytree(data / d, tmp_path / f"{d}.saved")
    with MessageStore.open(data, SMALL) as s:
        s.remove_lmqs(["lmq/2"])
    for d in ("index", "state"):
        shutil.rmtree(data / d)
        shutil.move(tmp_path / f"{d}.saved", data / d)
    with MessageStore.open(data, SMALL) as s:
        assert s.recovery.replayed_records == 1
        assert s.lmq("lmq/2") is None and s.get_offset("g", "lmq/2") is None
        assert s.verify().ok


# -- crashes during a segment roll ----------------------------------------------------


def _full_segment(data: Path) -> tuple[int, dict[str, int], list[Record]]:
    with MessageStore.open(data, TINY_SEGMENTS) as s:
        while len(s.log.segments()) < 3:
            fill(s, 1, seed=len(s.log.segments()) * 1000 + s.log.end, body=3000)
        # leave the last segment closed as if it were full: the next record rolls
        return s.log.end, {i.name: i.max_offset for i in s.lmqs()}, records(s)


def test_roll_created_the_segment_but_wrote_nothing(tmp_path):
    data = tmp_path / "data"
    end, offsets, recs = _full_segment(data)
    (data / "commitlog" / segment_name(end)).touch()
    with MessageStore.open(data, TINY_SEGMENTS) as s:
        assert not s.recovery.truncated_bytes and not s.recovery.skipped
        assert s.log.end == end and s.log.segments()[-1].base == end
        assert {i.name: i.max_offset for i in s.lmqs()} == offsets
        r = s.append(Message(topic="after", body=b"x"), ["lmq/0"])
        assert r.position == end and r.offsets == (offsets["lmq/0"],)
        assert_readable(s, recs)
        assert s.verify().ok


@pytest.mark.parametrize("cfg", [TINY_SEGMENTS, SKIP], ids=["refuse", "skip"])
def test_roll_wrote_part_of_the_first_record(tmp_path, cfg):
    data = tmp_path / "data"
    end, offsets, recs = _full_segment(data)
    first = encode_record(
        position=end,
        store_ms=1,
        message=Message(topic="first", body=b"f" * 500),
        dispatch=[(b"lmq/0", offsets["lmq/0"])],
    )
    (data / "commitlog" / segment_name(end)).write_bytes(first[:300])
    with MessageStore.open(data, cfg) as s:
        assert s.recovery.truncated_bytes == 300 and s.recovery.truncated_at == end
        assert s.log.end == end
        r = s.append(Message(topic="after", body=b"x"), ["lmq/0"])
        assert r.position == end and r.offsets == (offsets["lmq/0"],)
        assert_readable(s, recs)
        assert s.verify().ok


def test_roll_wrote_the_first_record_but_not_its_index(tmp_path):
    data = tmp_path / "data"
    end, offsets, _ = _full_segment(data)
    first = encode_record(
        position=end,
        store_ms=1,
        message=Message(topic="first", body=b"f" * 500),
        dispatch=[(b"lmq/0", offsets["lmq/0"]), (b"new", 0)],
    )
    (data / "commitlog" / segment_name(end)).write_bytes(first)
    with MessageStore.open(data, TINY_SEGMENTS) as s:
        assert s.recovery.replayed_records == 1 and s.recovery.replay_from == end
        assert s.read_at("lmq/0", offsets["lmq/0"]).topic == "first"
        assert s.read_at("new", 0).topic == "first"
        assert s.verify().ok


def test_find_next_record_on_garbage_finds_nothing(tmp_path):
    """Random bytes, magic numbers included, never resynchronise: a record must also
    carry its own position and a matching CRC."""
    data = tmp_path / "data"
    with MessageStore.open(data, SMALL) as s:
        fill(s, 3, seed=9)
        end = s.log.end
        seg = s.log.segments()[-1].path
    rnd = random.Random(9)
    junk = bytearray(rnd.randbytes(64 * 1024))
    for at in range(0, len(junk) - 8, 997):  # sprinkle magic numbers
        junk[at + 4 : at + 8] = b"LMQ1"
    with open(seg, "ab") as f:
        f.write(junk)
    with MessageStore.open(data, SKIP) as s:
        assert s.recovery.truncated_bytes == len(junk) and s.log.end == end
