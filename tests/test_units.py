import pytest

from cctestbed.units import (
    UnitError,
    format_percent,
    format_rate,
    format_size,
    format_time,
    parse_fraction,
    parse_queue,
    parse_rate,
    parse_size,
    parse_time,
)


@pytest.mark.parametrize(
    "text,bps",
    [
        ("80Mbit", 80_000_000),
        ("80 Mbit", 80_000_000),
        ("1.5Gbit", 1_500_000_000),
        ("100kbit", 100_000),
        ("100Kbit", 100_000),
        ("64bit", 64),
        ("9600bps", 9600),
        ("56Kbps", 56_000),
        ("56kbps", 56_000),
        ("10Mbps", 10_000_000),
        ("1Gbps", 1_000_000_000),
        ("2.5e1Mbit", 25_000_000),
        (1_000_000, 1_000_000),  # a bare number is bit/s
        ("-5Mbit", -5_000_000),  # sign parsed; ranges are checked by the schema
    ],
)
def test_rates(text, bps):
    assert parse_rate(text) == bps


@pytest.mark.parametrize(
    "text,ns",
    [
        ("25ms", 25_000_000),
        ("12.5ms", 12_500_000),
        ("1s", 10**9),
        ("0.5s", 500_000_000),
        ("1min", 60 * 10**9),
        ("250us", 250_000),
        ("250µs", 250_000),
        ("7ns", 7),
        ("0.5ns", 1),  # rounded half away from zero
        (2, 2 * 10**9),  # a bare number is seconds
        (0.25, 250_000_000),
    ],
)
def test_times(text, ns):
    assert parse_time(text) == ns


@pytest.mark.parametrize(
    "text,nbytes",
    [
        ("375KB", 375_000),
        ("375kB", 375_000),
        ("10MB", 10_000_000),
        ("1GB", 10**9),
        ("1500B", 1500),
        ("64KiB", 65_536),
        ("8MiB", 8 * 2**20),
        ("1GiB", 2**30),
        ("1.5KB", 1500),
        (3000, 3000),
    ],
)
def test_sizes(text, nbytes):
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("text,p", [("0%", 0.0), ("1%", 0.01), ("0.1%", 0.001), ("100%", 1.0), (0.02, 0.02), (0, 0.0)])
def test_fractions(text, p):
    assert parse_fraction(text) == pytest.approx(p, abs=0, rel=1e-15)


@pytest.mark.parametrize(
    "text,parsed",
    [
        ("2bdp", ("bdp", 2.0)),
        ("0.25BDP", ("bdp", 0.25)),
        ("250pkts", ("packets", 250.0)),
        ("250packets", ("packets", 250.0)),
        ("375KB", ("bytes", 375_000.0)),
        (1500, ("bytes", 1500.0)),
    ],
)
def test_queues(text, parsed):
    assert parse_queue(text) == parsed


@pytest.mark.parametrize(
    "parser,text,fragment",
    [
        (parse_rate, "80Mbt", "unknown rate unit 'Mbt'; valid are bit"),
        (parse_rate, "80", "missing unit"),
        (parse_rate, "fast", "not a rate"),
        (parse_rate, "10MBps", "byte rates are not accepted"),
        (parse_rate, "10MB/s", "byte rates are not accepted"),
        (parse_rate, "", "not a rate"),
        (parse_rate, True, "boolean"),
        (parse_rate, [1], "expected a rate"),
        (parse_time, "25 msec", "unknown time unit 'msec'; valid are ns, us"),
        (parse_time, "25", "missing unit"),
        (parse_time, "1.2.3s", "not a time"),
        (parse_time, float("nan"), "finite"),
        (parse_size, "10XB", "unknown size unit 'XB'; valid are B, KB"),
        (parse_size, "10mb", "unknown size unit 'mb'"),
        (parse_fraction, "1", "percentage"),
        (parse_fraction, "abc%", "not a percentage"),
        (parse_queue, "2bdb", "'2bdp'"),
        (parse_queue, "2.5pkts", "whole number"),
    ],
)
def test_invalid_quantities_say_what_is_valid(parser, text, fragment):
    with pytest.raises(UnitError) as e:
        parser(text)
    assert fragment in str(e.value)


@pytest.mark.parametrize("bps", [80_000_000, 1_500_000_000, 100_000, 123, 10**9 + 1, 0])
def test_rate_format_round_trips(bps):
    assert parse_rate(format_rate(bps)) == bps


@pytest.mark.parametrize("ns", [25_000_000, 12_500_000, 10**9, 60 * 10**9, 1, 1234567, 0])
def test_time_format_round_trips(ns):
    assert parse_time(format_time(ns)) == ns


@pytest.mark.parametrize("n", [375_000, 8 * 2**20, 1500, 1234567, 2_000_000, 3072, 0])
def test_size_format_round_trips(n):
    assert parse_size(format_size(n)) == n


def test_formats_read_well():
    assert format_rate(80_000_000) == "80Mbit"
    assert format_time(12_500_000) == "12.5ms"
    assert format_time(500_000_000) == "500ms"
    assert format_size(375_000) == "375KB"
    assert format_size(8 * 2**20) == "8MiB"
    assert format_size(1500) == "1500B"
    assert format_percent(0.001) == "0.1%"
    assert parse_fraction(format_percent(0.0001)) == 0.0001
