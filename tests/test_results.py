"""Writing results: atomic directories and deterministic parquet."""

import os
from pathlib import Path

import polars as pl
import pytest

from cctestbed.destination import ReplaceRefused, write_dir
from cctestbed.results import write_parquet


def test_write_dir_renames_into_place(tmp_path):
    dest = tmp_path / "a" / "out"
    write_dir(dest, lambda d: (d / "f.txt").write_text("x"))
    assert (dest / "f.txt").read_text() == "x"
    assert sorted(os.listdir(dest.parent)) == ["out"], "no temporary directory left behind"


def test_write_dir_failure_leaves_nothing(tmp_path):
    dest = tmp_path / "out"

    def boom(d):
        (d / "partial").write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_dir(dest, boom)
    assert not dest.exists()
    assert os.listdir(tmp_path) == []


def _results(d):
    """Something that looks like a results directory (what --force may replace)."""
    for f in ("trial.toml", "summary.json"):
        (d / f).write_text("1")


def test_write_dir_refuses_existing_unless_forced(tmp_path):
    dest = tmp_path / "out"
    write_dir(dest, _results)
    with pytest.raises(FileExistsError):
        write_dir(dest, lambda d: (d / "new").write_text("2"))
    assert sorted(os.listdir(dest)) == ["summary.json", "trial.toml"]
    write_dir(dest, lambda d: (d / "new").write_text("2"), force=True)
    assert os.listdir(dest) == ["new"]
    assert os.listdir(tmp_path) == ["out"]


def test_force_replaces_only_results_directories(tmp_path, monkeypatch):
    """--force never replaces a plain file, a foreign directory, the working directory or its parents."""
    plain = tmp_path / "notes.txt"
    plain.write_text("mine")
    foreign = tmp_path / "data"
    foreign.mkdir()
    (foreign / "keep").write_text("mine")
    work = tmp_path / "work"
    work.mkdir()
    _results(work)  # even a results directory is refused while it is the working directory
    monkeypatch.chdir(work)
    for dest in (plain, foreign, work, tmp_path, Path(".")):
        with pytest.raises(ReplaceRefused):
            write_dir(dest, lambda d: (d / "new").write_text("2"), force=True)
    assert plain.read_text() == "mine" and (foreign / "keep").read_text() == "mine"
    assert sorted(os.listdir(work)) == ["summary.json", "trial.toml"]
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")], "no temporary directory left behind"


def test_failed_forced_replace_keeps_old(tmp_path):
    dest = tmp_path / "out"
    write_dir(dest, _results)

    def boom(d):
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        write_dir(dest, boom, force=True)
    assert sorted(os.listdir(dest)) == ["summary.json", "trial.toml"]


def test_parquet_is_byte_identical_and_round_trips(tmp_path):
    df = pl.DataFrame(
        {
            "time_s": [0.01, 0.02, 0.03],
            "flow": pl.Series([0, 1, 0], dtype=pl.UInt32),
            "state": ["startup", "drain", "probe_bw"],
            "rtt_ms": [float("nan"), 25.0, 26.5],
            "bytes": pl.Series([1, 2, 3], dtype=pl.UInt64),
        }
    )
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    write_parquet(df, a)
    write_parquet(df.clone(), b)
    assert a.read_bytes() == b.read_bytes()
    back = pl.read_parquet(a)
    assert back.schema == df.schema
    assert back.equals(df, null_equal=True)


def test_parquet_strings_are_plain_and_only_they_dictionary_encoded(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    base = pl.DataFrame(
        {
            "time_s": [0.01 * i for i in range(6)],
            "flow": pl.Series([0, 1, 2, 0, 1, 2], dtype=pl.UInt32),
            "state": ["startup", "drain", "probe_bw", "probe_rtt", None, "drain"],
            "bytes": pl.Series(range(6), dtype=pl.UInt64),
        }
    )
    # several chunks, one of them a slice: the strings' offsets do not start at 0
    df = pl.concat([base.head(2), base.slice(3, 3)], rechunk=False)
    assert df.n_chunks() == 2
    path = tmp_path / "x.parquet"
    write_parquet(df, path)
    f = pq.ParquetFile(path)
    # a column without nulls is required, one with them optional
    assert f.schema_arrow == pa.schema([pa.field("time_s", pa.float64(), nullable=False),
                                        pa.field("flow", pa.uint32(), nullable=False),
                                        pa.field("state", pa.string(), nullable=True),
                                        pa.field("bytes", pa.uint64(), nullable=False)])
    meta = f.metadata
    assert meta.num_row_groups == 1
    for i in range(meta.num_columns):
        col = meta.row_group(0).column(i)
        assert col.compression == "ZSTD" and col.statistics.has_min_max
        assert ("RLE_DICTIONARY" in col.encodings) == (col.path_in_schema == "state"), col.path_in_schema
    assert pl.read_parquet(path).equals(df, null_equal=True)

    # the same bytes as the plain way of writing it (a cast of the strings by pyarrow)
    table = df.to_arrow()
    table = table.cast(pa.schema([pa.field(f.name, pa.string() if f.name == "state" else f.type,
                                           nullable=f.name == "state") for f in table.schema]))
    ref = tmp_path / "ref.parquet"
    pq.write_table(table, str(ref), compression="zstd", compression_level=3, row_group_size=1 << 20,
                   write_statistics=True, use_dictionary=["state"])
    assert path.read_bytes() == ref.read_bytes()
