"""Trial files: accepted forms, conversion to the core's config, and refusals."""

from pathlib import Path

import pytest

from cctestbed.config import ConfigError, algorithms, load_trial, parse_trial

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def core(d):
    return parse_trial(d).to_core()


def problems(d):
    with pytest.raises(ConfigError) as e:
        parse_trial(d)
    return e.value.problems


def test_default_example():
    t = load_trial(EXAMPLES / "default.toml")
    c = t.to_core()
    assert t.name == "default"
    assert c["duration_ns"] == 60 * 10**9
    assert t.steady_ns == (20 * 10**9, 60 * 10**9)
    assert c["link"]["capacity_bps"] == 80_000_000
    assert (c["link"]["delay_fwd_ns"], c["link"]["delay_rev_ns"]) == (12_500_000, 12_500_000)
    # BDP = 80e6 / 8 * 0.025 = 250 KB; 2 BDP = 500 KB
    assert t.link.bdp_bytes() == 250_000
    assert c["link"]["queue"] == {"limit_bytes": 500_000, "limit_packets": None}
    assert [f["cc"] for f in c["flows"]] == ["cubic", "cubic", "reno", "reno"]
    assert [f["start_ns"] for f in c["flows"]] == [0, 500_000_000, 1_000_000_000, 1_500_000_000]
    assert [f["group"] for f in c["flows"]] == ["cubic", "cubic", "reno", "reno"]


def test_every_example_is_valid():
    files = sorted(EXAMPLES.glob("*.toml"))
    assert files
    for f in files:
        if "[base]" in f.read_text():  # a sweep file: tests/test_sweep_examples.py checks those
            continue
        load_trial(f)


def test_deep_buffer_example_is_8_bdp():
    c = load_trial(EXAMPLES / "cubic-deep-buffer.toml").to_core()
    assert c["link"]["queue"]["limit_bytes"] == 2_000_000


@pytest.mark.parametrize(
    "link,fwd,rev",
    [
        ({"rtt": "25ms"}, 12_500_000, 12_500_000),
        ({"rtt": "3ns"}, 1, 2),
        ({"delay": "12.5ms"}, 12_500_000, 12_500_000),
        ({"delay_fwd": "10ms", "delay_rev": "30ms"}, 10_000_000, 30_000_000),
    ],
)
def test_delay_forms(trial_dict, link, fwd, rev):
    d = trial_dict()
    del d["link"]["rtt"]
    d["link"].update(link, queue="100pkts")
    c = core(d)
    assert (c["link"]["delay_fwd_ns"], c["link"]["delay_rev_ns"]) == (fwd, rev)


@pytest.mark.parametrize(
    "queue,limits",
    [
        ("2bdp", (50_000, None)),  # 10 Mbit x 20 ms = 25 KB
        ("0.5bdp", (12_500, None)),
        ("250pkts", (None, 250)),
        ("375KB", (375_000, None)),
        ("64KiB", (65_536, None)),
    ],
)
def test_queue_forms(trial_dict, queue, limits):
    d = trial_dict()
    d["link"]["queue"] = queue
    q = core(d)["link"]["queue"]
    assert (q["limit_bytes"], q["limit_packets"]) == limits


def test_bdp_queue_rounds_to_nearest_byte(trial_dict):
    d = trial_dict()
    d["link"].update(capacity="1Mbit", rtt="1ms", queue="12.1bdp")  # BDP 125 B -> 1512.5 B
    assert core(d)["link"]["queue"]["limit_bytes"] == 1513


@pytest.mark.parametrize(
    "loss,expected",
    [
        ("0%", {"kind": "none"}),
        (0, {"kind": "none"}),
        ("1%", {"kind": "bernoulli", "p": 0.01}),
        (0.001, {"kind": "bernoulli", "p": 0.001}),
        ({"model": "bernoulli", "p": "0.5%"}, {"kind": "bernoulli", "p": 0.005}),
        (
            {"model": "gilbert-elliott", "p": "1%", "r": "50%"},
            {"kind": "gilbert_elliott", "p": 0.01, "r": 0.5, "loss_good": 0.0, "loss_bad": 1.0},
        ),
        (
            {"model": "gilbert_elliott", "p": 0.01, "r": 0.3, "loss_good": "0.1%", "loss_bad": "80%"},
            {"kind": "gilbert_elliott", "p": 0.01, "r": 0.3, "loss_good": 0.001, "loss_bad": 0.8},
        ),
    ],
)
def test_loss_forms(trial_dict, loss, expected):
    d = trial_dict()
    d["link"]["loss"] = loss
    assert core(d)["link"]["loss"] == expected


def test_link_extras(trial_dict):
    d = trial_dict()
    d["link"].update(
        shaper={"rate": "10Mbit", "burst": "3KB"},
        policer={"rate": "8Mbit", "burst": "15KB"},
        schedule=[{"at": "1.5s", "capacity": "20Mbit"}, {"at": "0.5s", "capacity": "5Mbit"}],
        access_rate="1Gbit",
        delay_schedule=[{"at": "1s", "rtt": "50ms"}, {"at": "0.5s", "delay_fwd": "5ms", "delay_rev": "15ms"}],
        jitter="1ms",
    )
    link = core(d)["link"]
    assert link["delay_schedule"] == [
        {"at_ns": 500_000_000, "delay_fwd_ns": 5_000_000, "delay_rev_ns": 15_000_000},
        {"at_ns": 1_000_000_000, "delay_fwd_ns": 25_000_000, "delay_rev_ns": 25_000_000},
    ]
    assert link["jitter_ns"] == 1_000_000
    assert link["shaper"] == {"rate_bps": 10_000_000, "burst_bytes": 3000}
    assert link["policer"] == {"rate_bps": 8_000_000, "burst_bytes": 15_000}
    assert link["schedule"] == [
        {"at_ns": 500_000_000, "capacity_bps": 5_000_000},
        {"at_ns": 1_500_000_000, "capacity_bps": 20_000_000},
    ]
    assert link["access_rate_bps"] == 1_000_000_000
    assert parse_trial(d).capacity_schedule() == [(0.0, 10_000_000), (0.5, 5_000_000), (1.5, 20_000_000)]


def test_flow_group_options(trial_dict):
    name, defaults = next((n, p) for n, p in sorted(algorithms().items()) if p)
    key = sorted(defaults)[0]
    d = trial_dict(
        flows=[
            {
                "cc": name,
                "count": 3,
                "start": "100ms",
                "stagger": "250ms",
                "params": {key: defaults[key]},
                "extra_delay": "10ms",
                "size": "10MB",
                "rwnd": "8MiB",
                "pacing": True,
                "initial_cwnd": 4,
                "delayed_ack": {"timeout": "200ms", "segments_per_ack": 4, "quickacks": 0},
                "group": "tuned",
            },
            {"cc": "reno", "delayed_ack": False},
        ]
    )
    flows = core(d)["flows"]
    assert len(flows) == 4
    assert [f["start_ns"] for f in flows] == [100_000_000, 350_000_000, 600_000_000, 0]
    f = flows[0]
    assert f["params"] == {key: defaults[key]}
    assert f["extra_delay_ns"] == 10_000_000
    assert (f["size_bytes"], f["rwnd_bytes"]) == (10_000_000, 8 * 2**20)
    assert (f["pacing"], f["initial_cwnd"], f["group"]) == (True, 4, "tuned")
    assert f["delayed_ack"] == {"enabled": True, "timeout_ns": 200_000_000, "segments_per_ack": 4, "quickacks": 0}
    last = flows[3]
    assert last["delayed_ack"]["enabled"] is False
    assert (last["group"], last["size_bytes"], last["pacing"], last["initial_cwnd"]) == ("reno", None, None, 10)


def test_normalised_toml_round_trips(trial_dict, tmp_path):
    d = trial_dict(steady=["0.5s", "2s"], sample_interval="5ms")
    d["link"].update(loss={"model": "gilbert-elliott", "p": "1%", "r": "40%"}, schedule=[{"at": "1s", "capacity": "5Mbit"}])
    d["flows"][1].update(size="1MB", delayed_ack=False, group="short")
    t = parse_trial(d)
    p = tmp_path / "n.toml"
    p.write_text(t.to_toml())
    again = load_trial(p)
    assert again.to_core() == t.to_core()
    assert again.steady_ns == t.steady_ns
    assert again.name == t.name


def test_json_trial_file(trial_dict, write_trial):
    p = write_trial(trial_dict(), "x.json")
    assert load_trial(p).to_core() == parse_trial(trial_dict()).to_core()


def test_name_defaults_to_file_stem(trial_dict, write_trial):
    d = trial_dict()
    del d["name"]
    assert load_trial(write_trial(d, "my trial.toml")).name == "my_trial"


def test_bare_numbers_are_base_units(trial_dict):
    d = trial_dict(duration=2)
    d["link"].update(capacity=10_000_000, queue=30_000)
    c = core(d)
    assert (c["duration_ns"], c["link"]["capacity_bps"], c["link"]["queue"]["limit_bytes"]) == (2 * 10**9, 10**7, 30_000)


# --- refusals (the CLI tests check the same through the command line) ------------------------


@pytest.mark.parametrize(
    "link,fragment",
    [
        ({"rtt": "20ms", "delay": "10ms"}, "link.rtt: give exactly one of rtt"),
        ({}, "link.rtt: give exactly one of rtt"),
        ({"delay_fwd": "10ms"}, "link.delay_fwd: give both delay_fwd and delay_rev"),
        ({"rtt": "-20ms"}, "link.rtt: '-20ms': must be >= 0"),
    ],
)
def test_delay_refusals(trial_dict, link, fragment):
    d = trial_dict()
    del d["link"]["rtt"]
    d["link"].update(link)
    assert any(fragment in p for p in problems(d)), problems(d)


@pytest.mark.parametrize(
    "loss,fragment",
    [
        ("150%", "link.loss.p: '150%': must be between 0% and 100%"),
        ({"model": "gilbert-elliott", "p": 0.1}, "link.loss.r: required for loss model 'gilbert-elliott'"),
        ({"model": "bernoulli", "p": 0.1, "r": 0.2}, "link.loss.r: not used by loss model 'bernoulli'; it takes p"),
        ({"model": "burst"}, "link.loss.model: 'burst': Input should be 'none', 'bernoulli' or 'gilbert-elliott'"),
        ({"model": "bernoulli", "q": 0.1}, "link.loss.q: unknown key; valid are model, p, r, loss_good, loss_bad"),
    ],
)
def test_loss_refusals(trial_dict, loss, fragment):
    d = trial_dict()
    d["link"]["loss"] = loss
    assert any(fragment in p for p in problems(d)), problems(d)


@pytest.mark.parametrize(
    "mutate,fragment",
    [
        (lambda d: d["link"].update(shaper={"rate": "1Mbit", "burst": "1KB"}), "link.shaper.burst: '1KB': must be at least one packet"),
        (lambda d: d["link"].update(schedule=[{"at": "5s", "capacity": "1Mbit"}]), "link.schedule[0].at: '5s': must be within the duration"),
        (lambda d: d["link"].update(schedule=[{"at": "1s", "capacity": "0bit"}]), "link.schedule[0].capacity: '0bit': must be > 0"),
        (lambda d: d["link"].update(delay_schedule=[{"at": "3s", "rtt": "1ms"}]), "link.delay_schedule[0].at: '3s': must be within"),
        (lambda d: d["link"].update(delay_schedule=[{"at": "1s"}]), "link.delay_schedule[0].rtt: give exactly one of rtt"),
        (lambda d: d["link"].update(jitter="-1ms"), "link.jitter: '-1ms': must be >= 0"),
        (lambda d: d["flows"][0].update(count=0), "flows[0].count: 0: must be a whole number from 1 to 4294967295"),
        (lambda d: d["flows"][0].update(start="1.9s"), "flows[0].start: '1.9s': the group's last flow starts at 2s"),
        (lambda d: d["flows"][1].update(rwnd="1000B"), "flows[1].rwnd: '1KB': must be at least one MSS"),
        (lambda d: d["flows"][1].update(size="0B"), "flows[1].size: '0B': must be > 0"),
        (lambda d: d["flows"].clear(), "flows: List should have at least 1 item"),
        (lambda d: d.update(sample_interval="3s"), "sample_interval: '3s': must not exceed the duration (2s)"),
        (lambda d: d.update(steady=["1s", "1s"]), "steady: the window must start before it ends"),
        (lambda d: d.update(name="a/b"), "name: 'a/b': String should match pattern"),
        (lambda d: d.update(mss=1490), "mss: 1490: must be at most mtu - 20 (1480)"),
        (lambda d: d["link"].update(queue="2 bdpp"), "link.queue: '2 bdpp'"),
    ],
)
def test_other_refusals(trial_dict, mutate, fragment):
    d = trial_dict()
    mutate(d)
    assert any(fragment in p for p in problems(d)), problems(d)


def test_unknown_param_lists_valid_ones(trial_dict):
    name, defaults = next((n, p) for n, p in sorted(algorithms().items()) if p)
    d = trial_dict(flows=[{"cc": name, "params": {"no_such_knob": 1.0}}])
    (p,) = problems(d)
    assert p.startswith(f"flows[0].params.no_such_knob: 1.0: unknown parameter for {name}; valid are ")
    for k in defaults:
        assert k in p


def test_missing_required_fields(trial_dict):
    ps = problems({"link": {"rtt": "10ms"}})
    for want in ("duration: missing: required", "link.capacity: missing: required",
                 "link.queue: missing: required", "flows: missing: required"):
        assert want in ps


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_trial(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("duration = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_trial(bad)
