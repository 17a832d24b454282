"""The training run of the simulator core's profile-guided build (`make build`, see the Makefile).

Loads an instrumented build of the extension from the path given and runs trials through it,
so that the compiler learns which branches the simulator takes: every example trial file
(shortened), the thesis' Table 1 operating points (the sweeps users run most) and the data-transfer
rates (10 and 100 Gbit/s with the receiving NIC's coalescing), and the BPF port of BBR when it is
built (the interpreter and its compiled programs). A few seconds on one core.

    python bench/pgo_train.py target/pgo/gen/release/lib_core.so
"""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]


def load_core(path: Path) -> Any:
    """The instrumented extension, in place of the installed one, before the package imports it."""
    spec = importlib.util.spec_from_file_location("cctestbed._core", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"pgo_train: {path} is not a Python extension")
    core = importlib.util.module_from_spec(spec)
    sys.modules["cctestbed._core"] = core
    spec.loader.exec_module(core)
    return core


def trials() -> Iterator[Any]:
    """The training trials, validated (`cctestbed.config.Trial`)."""
    from cctestbed.config import ConfigError, load_trial

    for f in sorted((ROOT / "examples").glob("*.toml")):
        d = tomllib.loads(f.read_text())
        if "axes" in d or "base" in d:  # a sweep file
            continue
        # An example as written, for at most 10 s: the profile needs its paths through the code,
        # not its length; one whose schedule reaches past 10 s runs whole.
        trial = load_trial(f)
        if trial.duration > 10 * 10**9:
            try:
                trial = load_trial({**d, "duration": "10s"})
            except ConfigError:
                pass
        yield trial
    for cap in ("40Mbit", "120Mbit"):
        for queue in ("0.25bdp", "1bdp", "8bdp"):
            for flows in ([{"cc": "bbr", "count": 8}], [{"cc": "bbr", "count": 2}, {"cc": "cubic", "count": 2}]):
                yield load_trial({"name": "train", "duration": "20s", "flows": flows,
                                  "link": {"capacity": cap, "rtt": "25ms", "queue": queue}})
    for cap, secs in (("10Gbit", "1s"), ("100Gbit", "0.2s")):
        yield load_trial({"name": "train", "duration": secs, "flows": [{"cc": "bbr3", "count": 16}],
                          "link": {"capacity": cap, "rtt": "88ms", "queue": "0.15bdp",
                                   "receiver_nic": {"coalesce": "8us"}}})
    bbr_object = ROOT / "target" / "bpf" / "bbr.bpf.o"  # the BPF port of BBR, when make bpf built it
    if bbr_object.exists():
        for queue in ("0.5bdp", "2bdp"):
            yield load_trial({"name": "train", "duration": "10s", "flows": [{"cc": f"bpf:{bbr_object}", "count": 4}],
                              "link": {"capacity": "80Mbit", "rtt": "25ms", "queue": queue}})


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    core = load_core(Path(sys.argv[1]))
    sys.path.insert(0, str(ROOT / "python"))
    for trial in trials():
        core.simulate(trial.to_core_json(), core.StopFlag())


if __name__ == "__main__":
    main()
